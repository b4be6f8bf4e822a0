export {
  type BackoffJitter,
  type BackoffPolicy,
  ExponentialBackoff,
  type ExponentialBackoffOptions,
} from './BackoffPolicy.js';
export {
  type DedupBegin,
  type DedupEvictReason,
  DeduplicationTable,
  type DeduplicationTableOptions,
  type DeduplicationTableStats,
} from './DeduplicationTable.js';
export {
  DedupAbandonedError,
  DedupExpiredError,
  DedupReplyDroppedError,
  DedupSessionFullError,
} from './dedupErrors.js';
export { DIAGNOSTICS_CHANNELS } from './diagnostics.js';
export { EpochFilter, type EpochFilterStats, type StaleEpochDrop } from './EpochFilter.js';
export {
  RpcDecodeError,
  RpcError,
  type RpcErrorCode,
  type RpcErrorOptions,
  SessionNotFoundError,
} from './errors.js';
export {
  type IssuedSession,
  MAX_EPOCH,
  resumptionProof,
  SESSION_ID_BYTES,
  SESSION_SECRET_BYTES,
  SessionAuthority,
  type SessionAuthorityOptions,
  type SessionAuthorityStats,
} from './SessionAuthority.js';
export {
  SESSION_TRANSITIONS,
  type SessionEvents,
  type SessionState,
  type SessionStateChange,
  SessionStateMachine,
  type SessionStateMachineOptions,
} from './SessionStateMachine.js';

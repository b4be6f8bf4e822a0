export {
  type BackoffJitter,
  type BackoffPolicy,
  ExponentialBackoff,
  type ExponentialBackoffOptions,
  isRefusedConnect,
} from './BackoffPolicy.js';
export { CallSequencer, type CallSequencerOptions } from './CallSequencer.js';
export {
  type DedupBegin,
  type DedupEvictReason,
  DeduplicationTable,
  type DeduplicationTableOptions,
  type DeduplicationTableStats,
  type DedupResumeState,
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
  RemoteError,
  RpcDecodeError,
  RpcError,
  type RpcErrorCode,
  type RpcErrorOptions,
  SessionNotFoundError,
} from './errors.js';
export {
  type CallContext,
  type DispatchScope,
  type MethodHandler,
  type MethodOptions,
  MethodRegistry,
} from './MethodRegistry.js';
export { type ReplyBlock, ReplyBuffer, type ReplyMemory } from './ReplyBuffer.js';
export {
  type CallOptions,
  RpcClient,
  type RpcClientEvents,
  type RpcClientOptions,
  type RpcClientStats,
} from './RpcClient.js';
export {
  decodeRpcFrame,
  encodeRequestHeader,
  encodeRequestHeaderInto,
  encodeResponseHeader,
  encodeResponseHeaderInto,
  MAX_DEADLINE_MS,
  MAX_ERROR_CODE_BYTES,
  MAX_ERROR_MESSAGE_BYTES,
  MAX_METHOD_BYTES,
  MAX_PAYLOAD_BYTES,
  REQUEST_HEADER_BYTES,
  RESPONSE_HEADER_BYTES,
  RequestFlags,
  RPC_FRAME_VERSION,
  type RpcFrame,
  RpcFrameKind,
  type RpcFrameLimits,
  type RpcRequestHeader,
  type RpcResponseHeader,
  RpcStatus,
  remoteErrorOf,
  requestHeaderLength,
  responseHeaderLength,
  rpcFrameLength,
  rpcFrameLimits,
} from './RpcFrame.js';
export { RpcReply } from './RpcReply.js';
export {
  RpcServer,
  type RpcServerOptions,
  type RpcServerStats,
  type ServeOptions,
} from './RpcServer.js';
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
  decodeSessionFrame,
  encodeSessionFrame,
  MAX_WELCOME_SEQS,
  RPC_CONTROL_CHANNEL,
  RPC_DATA_CHANNEL,
  SESSION_FRAME_VERSION,
  type SessionFrame,
  SessionFrameKind,
} from './SessionFrame.js';
export {
  SESSION_TRANSITIONS,
  type SessionEvents,
  type SessionState,
  type SessionStateChange,
  SessionStateMachine,
  type SessionStateMachineOptions,
} from './SessionStateMachine.js';
export type { FallbackOptions, TransportChange } from './TransportFallback.js';

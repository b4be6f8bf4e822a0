import { RpcError } from './errors.js';

/** The request's sequence is below what the table remembers for its session. Never re-executed. */
export class DedupExpiredError extends RpcError {
  readonly sessionId: string;
  readonly seq: number;
  /** The lowest sequence the table still answers for this session. */
  readonly floor: number;

  constructor(sessionId: string, seq: number, floor: number) {
    super(
      'ERR_RPC_DEDUP_EXPIRED',
      `session ${sessionId}: request ${seq} is below ${floor}, the oldest one still remembered; not executed again`,
    );
    this.name = 'DedupExpiredError';
    this.sessionId = sessionId;
    this.seq = seq;
    this.floor = floor;
  }
}

/** The request executed, but its reply was dropped to stay within the table's byte bounds. */
export class DedupReplyDroppedError extends RpcError {
  readonly sessionId: string;
  readonly seq: number;

  constructor(sessionId: string, seq: number) {
    super(
      'ERR_RPC_DEDUP_REPLY_DROPPED',
      `session ${sessionId}: request ${seq} was executed but its reply is no longer kept; not executed again`,
    );
    this.name = 'DedupReplyDroppedError';
    this.sessionId = sessionId;
    this.seq = seq;
  }
}

/** The session holds as many unacknowledged requests as allowed. Retryable once replies are acknowledged. */
export class DedupSessionFullError extends RpcError {
  readonly sessionId: string;

  constructor(sessionId: string, limit: number) {
    super(
      'ERR_RPC_DEDUP_SESSION_FULL',
      `session ${sessionId}: ${limit} requests not yet acknowledged; acknowledge replies before sending more`,
      { retryable: true },
    );
    this.name = 'DedupSessionFullError';
    this.sessionId = sessionId;
  }
}

/**
 * The table holds `maxSessions` sessions (or the requests / bytes of its total bounds) and none
 * may be evicted (each may still resume): the new session or request is refused, not run.
 * Retryable once sessions end or expire.
 */
export class DedupTableFullError extends RpcError {
  constructor(what: string) {
    super('ERR_RPC_DEDUP_TABLE_FULL', `de-duplication table full: ${what}`, { retryable: true });
    this.name = 'DedupTableFullError';
  }
}

/** The first execution was abandoned before it applied anything; a retry executes the request. */
export class DedupAbandonedError extends RpcError {
  constructor(sessionId: string, seq: number, cause: unknown) {
    super(
      'ERR_RPC_DEDUP_ABANDONED',
      `session ${sessionId}: the execution of request ${seq} was abandoned`,
      cause === undefined ? { retryable: true } : { retryable: true, cause },
    );
    this.name = 'DedupAbandonedError';
  }
}

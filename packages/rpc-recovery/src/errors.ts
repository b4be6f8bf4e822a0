/**
 * Errors of @rdmajs/rpc-recovery. Users match on `code`, which never changes once published.
 *
 * User mistakes (bad options, bad arguments, illegal calls) are thrown synchronously after
 * validation. Decisions about a peer's request (a duplicate too old to answer, an unknown
 * session, a bad resumption proof, a malformed frame) are typed errors too, so a server can
 * turn each into a response and carry on: nothing a peer sends crashes the process.
 */

export type RpcErrorCode =
  /** Bad argument or option (thrown synchronously). */
  | 'ERR_RPC_INVALID_ARG'
  /** A call in a state that does not allow it (an illegal session transition, a restore while calls run). */
  | 'ERR_RPC_INVALID_STATE'
  /** The request's sequence is below what the de-duplication table still remembers for its session: never re-executed. */
  | 'ERR_RPC_DEDUP_EXPIRED'
  /** The request was executed but its reply is no longer kept (memory bounds): its outcome cannot be re-sent, and it is never re-executed. */
  | 'ERR_RPC_DEDUP_REPLY_DROPPED'
  /** The session has as many unacknowledged requests as the table keeps for one session; retry after acknowledging replies. */
  | 'ERR_RPC_DEDUP_SESSION_FULL'
  /** The first execution of this request was abandoned before it applied anything; a retry executes it. */
  | 'ERR_RPC_DEDUP_ABANDONED'
  /** The de-duplication table is full of sessions that may still resume: a new session (or a request needing room) is refused rather than evicting one; retry later. */
  | 'ERR_RPC_DEDUP_TABLE_FULL'
  /** Saved de-duplication state is corrupt or truncated (`offset` says where). */
  | 'ERR_RPC_DEDUP_CORRUPT'
  /** Saved de-duplication state holds more than this table's bounds allow. */
  | 'ERR_RPC_DEDUP_RESTORE_LIMIT'
  /** The session is not known here (never issued, or ended). */
  | 'ERR_RPC_SESSION_UNKNOWN'
  /** The session was evicted to keep the server within its bounds; it cannot be resumed. */
  | 'ERR_RPC_SESSION_EVICTED'
  /** The session (or its resumption challenge) outlived its time to live. */
  | 'ERR_RPC_SESSION_EXPIRED'
  /** The session has as many resume attempts (challenges) outstanding as allowed; retry later. */
  | 'ERR_RPC_SESSION_BUSY'
  /** The session failed for good (recovery impossible or given up); `cause` says why. */
  | 'ERR_RPC_SESSION_FAILED'
  /** No heartbeat answer from the peer within interval × misses: the connection is presumed dead. */
  | 'ERR_RPC_HEARTBEAT_TIMEOUT'
  /** Too many calls pending on this client (`maxPendingCalls`); retry when some settle. */
  | 'ERR_RPC_OVERLOADED'
  /** (The reason of a `recovering` change) a probe reached the primary transport: the session moves back to it from the fallback. */
  | 'ERR_RPC_TRANSPORT_SWITCH'
  /** The server holds `maxSessions` sessions that may all still resume: a new one is refused rather than evicting one; retry later. */
  | 'ERR_RPC_SESSION_LIMIT'
  /** A peer (remote host) holds `maxSessionsPerPeer` sessions or `maxChallengesPerPeer` challenges; retry when some end. */
  | 'ERR_RPC_PEER_LIMIT'
  /** The server holds `maxConnections` connections, or `maxConnectionsPerPeer` from this host: the new one is closed at once; retry later. */
  | 'ERR_RPC_CONNECTION_LIMIT'
  /** A connection opened more `rpc` data channels than the server allows (`maxDataChannels`): the connection is failed. */
  | 'ERR_RPC_CHANNEL_LIMIT'
  /** A resumption proof did not match (or no challenge was outstanding). */
  | 'ERR_RPC_AUTH'
  /** A peer's frame is malformed: truncated, an unknown kind, version or flag, a bad field (`offset` says where). */
  | 'ERR_RPC_PROTOCOL'
  /** The peer speaks another protocol version (session handshake): upgrade both sides together; no retry cures it. */
  | 'ERR_RPC_VERSION'
  /** A peer's frame declares a length beyond the configured limits (`offset` says where). */
  | 'ERR_RPC_FRAME_TOO_LARGE'
  /** No method of that name is registered on the server (sent as a Rejected response: not executed). */
  | 'ERR_RPC_METHOD_UNKNOWN'
  /** The request claimed idempotent for a method registered non-idempotent (Rejected: not executed). */
  | 'ERR_RPC_IDEMPOTENCY_MISMATCH'
  /** The call's deadline passed before its reply arrived (it may or may not have run). */
  | 'ERR_RPC_DEADLINE'
  /** The caller's AbortSignal fired before the reply arrived (it may or may not have run). */
  | 'ERR_RPC_ABORTED'
  /** The client was closed, or its connection lost, before the reply arrived. */
  | 'ERR_RPC_CLOSED'
  /** The server answered with an error; `remoteCode` and the message are the server's. */
  | 'ERR_RPC_REMOTE';

export interface RpcErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

/** Base of every error this package throws or rejects with. */
export class RpcError extends Error {
  readonly code: RpcErrorCode;
  /** True when the same operation, unchanged, may succeed if tried again later. */
  readonly retryable: boolean;

  constructor(code: RpcErrorCode, message: string, options: RpcErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RpcError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** Bytes that could not be decoded (saved state or a peer's frame); `offset` is where it went wrong. */
export class RpcDecodeError extends RpcError {
  /** Byte offset in the input of the field that failed validation. */
  readonly offset: number;

  constructor(
    code:
      | 'ERR_RPC_DEDUP_CORRUPT'
      | 'ERR_RPC_PROTOCOL'
      | 'ERR_RPC_FRAME_TOO_LARGE'
      | 'ERR_RPC_VERSION',
    message: string,
    offset: number,
  ) {
    super(code, `${message} (at byte ${offset})`);
    this.name = 'RpcDecodeError';
    this.offset = offset;
  }
}

/** The session is not known (never opened, closed, or forgotten), or was evicted. */
export class SessionNotFoundError extends RpcError {
  readonly sessionId: string;

  constructor(code: 'ERR_RPC_SESSION_UNKNOWN' | 'ERR_RPC_SESSION_EVICTED', sessionId: string) {
    super(
      code,
      code === 'ERR_RPC_SESSION_EVICTED'
        ? `session ${sessionId} was evicted to stay within the server's bounds; it cannot be resumed`
        : `session ${sessionId} is not known`,
    );
    this.name = 'SessionNotFoundError';
    this.sessionId = sessionId;
  }
}

/** The server's answer was an error: its code and message, never its stack. */
export class RemoteError extends RpcError {
  /** The server's error code (the handler's `code`, or one of this package's). */
  readonly remoteCode: string;
  /** The server's status: 'error' (the handler ran and failed), 'rejected' (not run), 'unknown'. */
  readonly outcome: 'error' | 'rejected' | 'unknown';

  constructor(remoteCode: string, message: string, outcome: 'error' | 'rejected' | 'unknown') {
    super('ERR_RPC_REMOTE', message, { retryable: outcome === 'rejected' });
    this.name = 'RemoteError';
    this.remoteCode = remoteCode;
    this.outcome = outcome;
  }
}

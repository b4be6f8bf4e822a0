/**
 * Errors of @rdmajs/mux and of every transport implementing its contract. Users match on
 * `code`, which never changes once published.
 *
 * User mistakes (bad options, bad parts, calls after close) throw synchronously. Waits end
 * with ERR_MUX_DEADLINE or ERR_MUX_ABORTED. A connection that fails rejects everything pending
 * on it, and every channel on it, with the one error that failed it.
 */

export type MuxErrorCode =
  /** Bad argument or option (thrown synchronously). */
  | 'ERR_MUX_INVALID_ARG'
  /** The connection or channel is closed (or closing) for this operation. */
  | 'ERR_MUX_CLOSED'
  /** A wait passed its deadline. */
  | 'ERR_MUX_DEADLINE'
  /** A wait was cancelled by its AbortSignal (`cause` is the signal's reason). */
  | 'ERR_MUX_ABORTED'
  /** A message is larger than the peer accepts (or than the send window). */
  | 'ERR_MUX_TOO_LARGE'
  /** The peer sent a malformed frame, an unknown channel, a bad sequence, or broke the window. */
  | 'ERR_MUX_PROTOCOL'
  /** The handshake failed: malformed, unexpected message, or timed out. */
  | 'ERR_MUX_HANDSHAKE'
  /** The peer speaks another protocol version. */
  | 'ERR_MUX_VERSION'
  /** Mutual authentication failed: the peer does not hold the shared secret (or we do not). */
  | 'ERR_MUX_AUTH'
  /**
   * A protected message failed authentication: altered, replayed, reordered or forged on the
   * way (the connection is destroyed with this error).
   */
  | 'ERR_MUX_INTEGRITY'
  /** The peer is an rdmajs peer of another transport (e.g. an RDMA client at a TCP listener). */
  | 'ERR_MUX_TRANSPORT'
  /**
   * The two sides switched off different lessons for a measurement (RdmaTransport's
   * `ablations`): they must agree, so the connection is not made.
   */
  | 'ERR_MUX_ABLATION'
  /** The peer went away: the connection closed, reset or could not be established. */
  | 'ERR_MUX_CONNECTION_LOST'
  /** The peer stopped answering heartbeats within the configured deadline. */
  | 'ERR_MUX_PEER_TIMEOUT'
  /** An inbound message was used after `release()`. */
  | 'ERR_MUX_RELEASED'
  /** This transport's connections cannot do it (a one-sided `read()` over TCP: see `supportsRead`). */
  | 'ERR_MUX_NOT_SUPPORTED'
  /**
   * A one-sided read names bytes outside the remote region's descriptor, or a destination
   * outside its block or not in this connection's registered memory (refused before posting).
   */
  | 'ERR_MUX_READ_RANGE'
  /**
   * A read-region descriptor of another incarnation of the peer (a restarted or other process)
   * or of another peer: refused before posting. Fetch a fresh descriptor.
   */
  | 'ERR_MUX_STALE_DESCRIPTOR'
  /**
   * A one-sided read failed on the RDMA path (the peer closed the region: REM_ACCESS_ERR; or
   * the peer's read failed on the same QP pair): the connection's read QP is in error, so
   * every read on it fails from now on; channels are not affected. Retryable on a new
   * connection (`cause`: the completion error).
   */
  | 'ERR_MUX_READ_FAILED';

export interface MuxErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

/** Base of every error of this package and its transports. */
export class MuxError extends Error {
  readonly code: MuxErrorCode;
  /** True when the same operation may succeed if tried again (on a new connection). */
  readonly retryable: boolean;

  constructor(code: MuxErrorCode, message: string, options: MuxErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'MuxError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** A wait passed its deadline. Retryable. */
export class MuxDeadlineError extends MuxError {
  constructor(what: string, timeoutMs: number) {
    super('ERR_MUX_DEADLINE', `${what}: no result within ${timeoutMs} ms`, { retryable: true });
    this.name = 'MuxDeadlineError';
  }
}

/** A wait was cancelled; `cause` is the signal's reason. */
export class MuxAbortError extends MuxError {
  constructor(what: string, reason: unknown) {
    super('ERR_MUX_ABORTED', `${what}: aborted`, { cause: reason });
    this.name = 'MuxAbortError';
  }
}

/** The peer broke the wire protocol; the connection is destroyed with this error. */
export class MuxProtocolError extends MuxError {
  constructor(message: string) {
    super('ERR_MUX_PROTOCOL', message);
    this.name = 'MuxProtocolError';
  }
}

/**
 * The handshake failed; `code` tells why (ERR_MUX_HANDSHAKE, ERR_MUX_VERSION, ERR_MUX_AUTH,
 * ERR_MUX_TRANSPORT; ERR_MUX_ABLATION in RdmaTransport's setup).
 */
export class MuxHandshakeError extends MuxError {
  /** The peer's protocol version, when it told us (ERR_MUX_VERSION). */
  readonly peerVersion: number | undefined;

  constructor(
    code:
      | 'ERR_MUX_HANDSHAKE'
      | 'ERR_MUX_VERSION'
      | 'ERR_MUX_AUTH'
      | 'ERR_MUX_TRANSPORT'
      | 'ERR_MUX_ABLATION',
    message: string,
    peerVersion?: number,
  ) {
    super(code, message);
    this.name = 'MuxHandshakeError';
    this.peerVersion = peerVersion;
  }
}

/** The connection to the peer is gone (closed, reset, refused, or heartbeats missed). */
export class MuxConnectionError extends MuxError {
  constructor(
    code: 'ERR_MUX_CONNECTION_LOST' | 'ERR_MUX_PEER_TIMEOUT',
    message: string,
    cause?: unknown,
  ) {
    super(code, message, { cause, retryable: true });
    this.name = 'MuxConnectionError';
  }
}

/** The object is closed for this operation. */
export class MuxClosedError extends MuxError {
  constructor(what: string, cause?: unknown) {
    super('ERR_MUX_CLOSED', `${what}: closed`, cause === undefined ? {} : { cause });
    this.name = 'MuxClosedError';
  }
}

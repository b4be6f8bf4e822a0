/**
 * Stable codes of `@rdmajs/ps-service`. The `ERR_PS_REQUEST_*` codes go back to the caller
 * of a refused request (as the RPC's remote code; nothing was applied); the others are
 * the service's own failures.
 */
export type PsServiceErrorCode =
  /** Bad options or a bad table file (the message names the field). */
  | 'ERR_PS_SERVICE_CONFIG'
  /** A call after close. */
  | 'ERR_PS_SERVICE_CLOSED'
  /** No sparse table or dense tensor of that name on this shard. */
  | 'ERR_PS_REQUEST_UNKNOWN_TABLE'
  /** A push whose dim differs from the table's. */
  | 'ERR_PS_REQUEST_WRONG_DIM'
  /** A dense push whose length differs from the tensor's. */
  | 'ERR_PS_REQUEST_LENGTH_MISMATCH'
  /** More keys in one request than the shard takes. */
  | 'ERR_PS_REQUEST_BATCH_TOO_LARGE'
  /** NaN or ±Inf in the gradients of a table whose policy rejects them. */
  | 'ERR_PS_REQUEST_NON_FINITE'
  /** The service is draining for shutdown: retry on another connection. */
  | 'ERR_PS_REQUEST_DRAINING'
  /** A push under a writer id another connected session pushes under (writer ids are bound to the session that uses them). */
  | 'ERR_PS_REQUEST_WRITER_IN_USE'
  /** A push under one more writer id than a session may use (`maxWritersPerSession`). */
  | 'ERR_PS_REQUEST_TOO_MANY_WRITERS'
  /** A push under a new writer id from a peer that created `maxNewWritersPerPeer` writers the store still remembers. */
  | 'ERR_PS_REQUEST_WRITER_QUOTA';

export class PsServiceError extends Error {
  readonly code: PsServiceErrorCode;
  readonly retryable: boolean;

  constructor(
    code: PsServiceErrorCode,
    message: string,
    options: { cause?: unknown; retryable?: boolean } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'PsServiceError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

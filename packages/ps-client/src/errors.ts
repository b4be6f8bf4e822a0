/** Stable codes of `@rdmajs/ps-client`; users match on these, they are never renamed. */
export type PsClientErrorCode =
  /** Bad options or arguments (wrong types, keys that are not u64 bigints, grads of the wrong length). */
  | 'ERR_PS_CLIENT_INVALID_ARG'
  /** No sparse table or dense tensor of that name on the servers. */
  | 'ERR_PS_CLIENT_UNKNOWN_TABLE'
  /** `out` or `grads` does not match keys × the table's dim (or the tensor's length). */
  | 'ERR_PS_CLIENT_LENGTH_MISMATCH'
  /** More keys in one call than the servers take. */
  | 'ERR_PS_CLIENT_BATCH_TOO_LARGE'
  /** NaN or ±Inf in gradients for a table that rejects them. */
  | 'ERR_PS_CLIENT_NON_FINITE'
  /** The shards disagree on a table's shape, or a shard is not the one the list names. */
  | 'ERR_PS_CLIENT_SHARD_MISMATCH'
  /** A server refused the request (`remoteCode` says why; nothing was applied). */
  | 'ERR_PS_CLIENT_REMOTE'
  /** The call's deadline passed; a push may or may not have been applied. */
  | 'ERR_PS_CLIENT_DEADLINE'
  /** A shard could not be reached within the reconnect budget. */
  | 'ERR_PS_CLIENT_UNAVAILABLE'
  /** Too many pushes queued for a shard: retry after some settle. */
  | 'ERR_PS_CLIENT_OVERLOADED'
  /** The client was closed. */
  | 'ERR_PS_CLIENT_CLOSED'
  /** Pulled rows used after their `release()`. */
  | 'ERR_PS_CLIENT_RELEASED';

export class PsClientError extends Error {
  readonly code: PsClientErrorCode;
  readonly retryable: boolean;
  /** For ERR_PS_CLIENT_REMOTE: the server's code (e.g. `ERR_PS_REQUEST_WRONG_DIM`). */
  readonly remoteCode: string | undefined;
  /** The shard the failure concerns, when one does. */
  readonly shard: string | undefined;

  constructor(
    code: PsClientErrorCode,
    message: string,
    options: { cause?: unknown; retryable?: boolean; remoteCode?: string; shard?: string } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'PsClientError';
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.remoteCode = options.remoteCode;
    this.shard = options.shard;
  }
}

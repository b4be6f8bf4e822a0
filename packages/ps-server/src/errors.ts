/**
 * Errors of @rdmajs/ps-server. Users match on `code`, which never changes once published.
 *
 * Bad arguments (unknown table, wrong lengths, bad options) are thrown synchronously.
 * Corrupt or truncated durable files are `ERR_PS_CORRUPT` naming the file and byte offset.
 * A table with native kernels whose addon does not load is `ERR_PS_NATIVE_LOAD`.
 */

export type PsErrorCode =
  | 'ERR_PS_INVALID_ARG'
  | 'ERR_PS_UNKNOWN_TABLE'
  | 'ERR_PS_CLOSED'
  | 'ERR_PS_CORRUPT'
  | 'ERR_PS_NO_VALID_SNAPSHOT'
  | 'ERR_PS_CONFIG_MISMATCH'
  | 'ERR_PS_IO'
  | 'ERR_PS_NATIVE_LOAD'
  /** A push seq too far above its session's last applied one (see StoreOptions.maxSeqGap). */
  | 'ERR_PS_SEQ_GAP'
  /**
   * A push from a session not seen yet while `maxSessions` are remembered and none has been
   * idle for `sessionIdleMs` (see StoreOptions): nothing applied; not retryable (room frees only as writers idle out).
   */
  | 'ERR_PS_TOO_MANY_SESSIONS'
  /** This platform cannot honour the option (`oneSidedRead` off x86-64: see StoreViewWriter). */
  | 'ERR_PS_NOT_SUPPORTED';

export interface PsErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

/** Base of every error this package throws. */
export class PsError extends Error {
  readonly code: PsErrorCode;
  /** True when the same call may succeed later. */
  readonly retryable: boolean;

  constructor(code: PsErrorCode, message: string, options: PsErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'PsError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** A snapshot or log file failed validation: `file` and the byte `offset` of the problem. */
export class PsCorruptError extends PsError {
  readonly file: string;
  readonly offset: number;

  constructor(file: string, offset: number, what: string, options: PsErrorOptions = {}) {
    super('ERR_PS_CORRUPT', `${file} at byte ${offset}: ${what}`, options);
    this.name = 'PsCorruptError';
    this.file = file;
    this.offset = offset;
  }
}

/** Every snapshot in the directory was bad: `errors` has one PsCorruptError per file tried. */
export class PsNoValidSnapshotError extends PsError {
  readonly errors: readonly PsError[];

  constructor(dir: string, errors: readonly PsError[]) {
    super(
      'ERR_PS_NO_VALID_SNAPSHOT',
      `no valid snapshot in ${dir}: ${errors.map((e) => e.message).join('; ')}`,
    );
    this.name = 'PsNoValidSnapshotError';
    this.errors = errors;
  }
}

/** Thrown for a bad argument. */
export function invalidArg(message: string): PsError {
  return new PsError('ERR_PS_INVALID_ARG', message);
}

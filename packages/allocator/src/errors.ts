/**
 * Errors of @rdmajs/allocator. Users match on `code`, which never changes once published.
 *
 * User mistakes (bad sizes, bad options, double release, use after release, a block of
 * another allocator) are thrown synchronously. A registration the injected registrar could
 * not perform is an `ERR_ALLOC_REGISTRATION` with the registrar's error as `cause`.
 */

export type AllocErrorCode =
  | 'ERR_ALLOC_INVALID_ARG'
  | 'ERR_ALLOC_LIMIT'
  | 'ERR_ALLOC_DOUBLE_RELEASE'
  | 'ERR_ALLOC_USE_AFTER_RELEASE'
  | 'ERR_ALLOC_FOREIGN_BLOCK'
  | 'ERR_ALLOC_CLOSED'
  | 'ERR_ALLOC_REGISTRATION';

export interface AllocErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

/** Base of every error this package throws. */
export class AllocError extends Error {
  readonly code: AllocErrorCode;
  /** True when the same call may succeed later (e.g. after other blocks are released). */
  readonly retryable: boolean;

  constructor(code: AllocErrorCode, message: string, options: AllocErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AllocError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/**
 * A registered-memory limit would be exceeded. `retryable` is true when the request could
 * fit once memory in use is released, false when it can never fit.
 */
export class AllocLimitError extends AllocError {
  /** The limit in bytes (or entries, for the registration cache's entry limit). */
  readonly limit: number;
  /** What the call asked for, in the same unit as `limit`. */
  readonly requested: number;

  constructor(message: string, limit: number, requested: number, retryable: boolean) {
    super('ERR_ALLOC_LIMIT', message, { retryable });
    this.name = 'AllocLimitError';
    this.limit = limit;
    this.requested = requested;
  }
}

/**
 * A block was used after its release: through the block itself (always detected), or, in
 * debug mode, by writing through a view kept past `release()` (detected when the memory is
 * handed out again and its poison pattern is found overwritten).
 */
export class AllocUseAfterReleaseError extends AllocError {
  /** Address of the first byte found overwritten (debug detection), else the block's address. */
  readonly addr: number;
  /** Allocation stack of the released block, when debug mode captured it. */
  readonly allocatedAt: string | undefined;
  /** Release stack of the released block, when debug mode captured it. */
  readonly releasedAt: string | undefined;

  constructor(
    message: string,
    addr: number,
    allocatedAt: string | undefined,
    releasedAt: string | undefined,
  ) {
    super('ERR_ALLOC_USE_AFTER_RELEASE', message);
    this.name = 'AllocUseAfterReleaseError';
    this.addr = addr;
    this.allocatedAt = allocatedAt;
    this.releasedAt = releasedAt;
  }
}

/** The injected registrar failed (e.g. `ibv_reg_mr` ENOMEM) or returned an unusable region. */
export class AllocRegistrationError extends AllocError {
  /** 'allocate' | 'register' | 'deregister': which registrar call failed. */
  readonly operation: 'allocate' | 'register' | 'deregister';

  constructor(
    operation: 'allocate' | 'register' | 'deregister',
    message: string,
    cause: unknown,
    retryable: boolean,
  ) {
    super('ERR_ALLOC_REGISTRATION', message, { cause, retryable });
    this.name = 'AllocRegistrationError';
    this.operation = operation;
  }
}

export function invalidArg(message: string): AllocError {
  return new AllocError('ERR_ALLOC_INVALID_ARG', message);
}

export function closedError(what: string): AllocError {
  return new AllocError('ERR_ALLOC_CLOSED', `${what}: closed`);
}

/** Wraps an error thrown by the registrar; keeps its `retryable` when it has one. */
export function registrationError(
  operation: 'allocate' | 'register' | 'deregister',
  bytes: number,
  cause: unknown,
): AllocRegistrationError {
  const detail = cause instanceof Error ? cause.message : String(cause);
  const own = (cause as { retryable?: unknown } | null)?.retryable;
  // A failed allocate/register is usually a resource shortage (ENOMEM, memlock limit):
  // it may succeed once memory is released. A failed deregister is not retried.
  const retryable = typeof own === 'boolean' ? own : operation !== 'deregister';
  return new AllocRegistrationError(
    operation,
    `registrar ${operation} of ${bytes} bytes failed: ${detail}`,
    cause,
    retryable,
  );
}

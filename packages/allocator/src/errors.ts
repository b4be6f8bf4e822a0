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

export function closedError(what: string, why = 'closed'): AllocError {
  return new AllocError('ERR_ALLOC_CLOSED', `${what}: ${why}`);
}

/** errno values (and their names) of a resource shortage that may end by itself. */
const SHORTAGE_ERRNOS = new Set<unknown>([11, 12, 16, 105, 'EAGAIN', 'ENOMEM', 'EBUSY', 'ENOBUFS']);

/**
 * Whether the same registrar call may succeed later without the caller changing anything.
 * The registrar's own `retryable` decides when it has one (verbs errors do); otherwise only a
 * resource shortage (ENOMEM, EAGAIN, EBUSY, ENOBUFS by `errno` or `code`) is. A TypeError or
 * any other unexplained failure is not: retrying it would only repeat it.
 */
function registrarRetryable(cause: unknown): boolean {
  if (cause === null || typeof cause !== 'object') return false;
  const c = cause as { retryable?: unknown; errno?: unknown; code?: unknown };
  if (typeof c.retryable === 'boolean') return c.retryable;
  return SHORTAGE_ERRNOS.has(c.errno) || SHORTAGE_ERRNOS.has(c.code);
}

/** Wraps an error thrown by the registrar; see registrarRetryable for `retryable`. */
export function registrationError(
  operation: 'allocate' | 'register' | 'deregister',
  bytes: number,
  cause: unknown,
): AllocRegistrationError {
  const detail = cause instanceof Error ? cause.message : safeString(cause);
  // A failed deregister is never retried: the region is dropped from the books either way.
  const retryable = operation !== 'deregister' && registrarRetryable(cause);
  return new AllocRegistrationError(
    operation,
    `registrar ${operation} of ${bytes} bytes failed: ${detail}`,
    cause,
    retryable,
  );
}

/** String(v), except that a value without a usable toString (null prototype) never throws. */
function safeString(v: unknown): string {
  try {
    return String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}

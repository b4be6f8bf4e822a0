/**
 * Errors of @rdmajs/verbs. Users match on `code`, which never changes once published.
 * Three families are kept apart: user mistakes (thrown synchronously after validation),
 * system failures (errno + the verb that failed) and completion failures (status of a
 * work completion). The README's "Errors" table lists every code.
 */
import { getSystemErrorName } from 'node:util';
import type { WcStatus } from './types.js';

export type RdmaErrorCode =
  | 'ERR_RDMA_INVALID_ARG'
  | 'ERR_RDMA_OUT_OF_RANGE'
  | 'ERR_RDMA_INVALID_STATE'
  | 'ERR_RDMA_QUEUE_FULL'
  | 'ERR_RDMA_BUSY'
  | 'ERR_RDMA_CLOSED'
  | 'ERR_RDMA_MR_INVALID'
  | 'ERR_RDMA_NO_DEVICE'
  | 'ERR_RDMA_PROVIDER_UNAVAILABLE'
  | 'ERR_RDMA_UNREACHABLE'
  | 'ERR_RDMA_LINK_VERSION'
  | 'ERR_RDMA_TIMEOUT'
  | 'ERR_RDMA_SYSTEM'
  | 'ERR_RDMA_COMPLETION'
  | 'ERR_RDMA_CQ_OVERRUN'
  | 'ERR_RDMA_NATIVE_LOAD';

export interface RdmaErrorOptions {
  cause?: unknown;
  /** True only when the same call can succeed later without the caller changing anything. */
  retryable?: boolean;
}

/** Base of every error this package throws or emits. */
export class RdmaError extends Error {
  readonly code: RdmaErrorCode;
  readonly retryable: boolean;

  constructor(code: RdmaErrorCode, message: string, options: RdmaErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RdmaError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** The errno's symbolic name (`ENOMEM`), or `errno N` for one Node does not know. */
export function errnoName(errno: number): string {
  try {
    return getSystemErrorName(-Math.abs(errno));
  } catch {
    return `errno ${errno}`;
  }
}

// errnos after which the same call may succeed unchanged (resources come back).
const TRANSIENT_ERRNOS = new Set([11 /* EAGAIN */, 4 /* EINTR */]);

/** A system call or verb failed: keeps errno, its name and the verb's name. */
export class RdmaSystemError extends RdmaError {
  readonly errno: number;
  /** The errno's symbolic name, e.g. `ENOMEM`. */
  readonly errnoName: string;
  readonly syscall: string;

  constructor(
    syscall: string,
    errno: number,
    message: string,
    code: RdmaErrorCode = 'ERR_RDMA_SYSTEM',
  ) {
    super(code, `${syscall}: ${message}`, { retryable: TRANSIENT_ERRNOS.has(errno) });
    this.name = 'RdmaSystemError';
    this.errno = errno;
    this.errnoName = errnoName(errno);
    this.syscall = syscall;
  }
}

/** A post that stopped part-way through a batch: `posted` work requests went in. */
export class RdmaPostError extends RdmaError {
  /** How many work requests of the batch were posted before the one that failed. */
  readonly posted: number;

  constructor(code: RdmaErrorCode, message: string, posted: number, retryable: boolean) {
    super(code, message, { retryable });
    this.name = 'RdmaPostError';
    this.posted = posted;
  }
}

/** A work completion that did not succeed, kept with its status, wrId and vendor error. */
export class RdmaCompletionError extends RdmaError {
  readonly status: WcStatus;
  readonly wrId: number;
  readonly vendorErr: number;

  constructor(status: WcStatus, wrId: number, vendorErr: number, retryable: boolean) {
    super('ERR_RDMA_COMPLETION', `work request ${wrId} completed with ${status}`, { retryable });
    this.name = 'RdmaCompletionError';
    this.status = status;
    this.wrId = wrId;
    this.vendorErr = vendorErr;
  }
}

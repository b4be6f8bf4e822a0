/**
 * Errors of @rdmajs/flowctl. Users match on `code`, which never changes once published.
 *
 * User mistakes (bad sizes, bad options, calls after close) are thrown synchronously after
 * validation. Waits that end without the resource (deadline, abort, close, full queue) reject
 * their promise with one of these errors; nothing ever hangs without a deadline.
 */

export type FlowctlErrorCode =
  | 'ERR_FLOWCTL_INVALID_ARG'
  | 'ERR_FLOWCTL_TOO_LARGE'
  | 'ERR_FLOWCTL_DEADLINE'
  | 'ERR_FLOWCTL_ABORTED'
  | 'ERR_FLOWCTL_CLOSED'
  | 'ERR_FLOWCTL_QUEUE_FULL'
  | 'ERR_FLOWCTL_PROTOCOL';

export interface FlowctlErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

/** Base of every error this package throws or rejects with. */
export class FlowctlError extends Error {
  readonly code: FlowctlErrorCode;
  /** True when the same operation may succeed if tried again later. */
  readonly retryable: boolean;

  constructor(code: FlowctlErrorCode, message: string, options: FlowctlErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'FlowctlError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** A wait (credit or window) passed its deadline. Retryable: capacity may free up later. */
export class FlowctlDeadlineError extends FlowctlError {
  /** The absolute deadline, in the injected clock's milliseconds. */
  readonly deadline: number;

  constructor(what: string, deadline: number) {
    super('ERR_FLOWCTL_DEADLINE', `${what}: deadline passed while waiting`, { retryable: true });
    this.name = 'FlowctlDeadlineError';
    this.deadline = deadline;
  }
}

/** A wait was cancelled through its AbortSignal; `cause` is the signal's reason. */
export class FlowctlAbortError extends FlowctlError {
  constructor(what: string, reason: unknown) {
    super('ERR_FLOWCTL_ABORTED', `${what}: aborted`, { cause: reason, retryable: false });
    this.name = 'FlowctlAbortError';
  }
}

/** The object was closed (or destroyed) before or during the call. */
export class FlowctlClosedError extends FlowctlError {
  constructor(what: string, cause?: unknown) {
    super('ERR_FLOWCTL_CLOSED', `${what}: closed`, cause === undefined ? {} : { cause });
    this.name = 'FlowctlClosedError';
  }
}

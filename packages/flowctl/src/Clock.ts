/**
 * The only source of time in this package. Core logic never touches real timers: every
 * object takes a `Clock`, and tests or simulations pass a virtual one (see `ManualClock`).
 */
export interface Clock {
  /** Milliseconds on a monotonic time line (any origin). */
  now(): number;
  /** Calls `callback` once, `delayMs` from now. Returns a handle for `clearTimer`. */
  setTimer(callback: () => void, delayMs: number): unknown;
  /** Cancels a timer; a handle that already fired or was cleared is ignored. */
  clearTimer(handle: unknown): void;
}

/** The default clock: `performance.now()` and the host's `setTimeout`. */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimer: (callback, delayMs) => setTimeout(callback, Math.max(0, delayMs)),
  clearTimer: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

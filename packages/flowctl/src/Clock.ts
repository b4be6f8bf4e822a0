/**
 * The only source of time in this package. Core logic never touches real timers: every
 * object takes a `Clock`, and tests or simulations pass a virtual one (see `ManualClock`).
 */
export interface Clock {
  /** Milliseconds on a monotonic time line (any origin). */
  now(): number;
  /**
   * Calls `callback` once, `delayMs` from now (or earlier, if the host caps delays: a wait
   * whose timer fires before its deadline sets a new one). Returns a handle for `clearTimer`.
   */
  setTimer(callback: () => void, delayMs: number): unknown;
  /** Cancels a timer; a handle that already fired or was cleared is ignored. */
  clearTimer(handle: unknown): void;
}

/** setTimeout's largest delay; a longer one would fire after 1 ms (TimeoutOverflowWarning). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The default clock: `performance.now()` and the host's `setTimeout`. A delay beyond
 * setTimeout's range fires at the end of the range instead (waits then set their timer
 * again for the rest: see `Clock.setTimer`).
 */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimer: (callback, delayMs) =>
    setTimeout(callback, Math.min(MAX_TIMER_MS, Math.max(0, delayMs))),
  clearTimer: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

import { type Clock, systemClock } from '@rdmajs/flowctl';

/**
 * A flowctl Clock for one user that keeps at most one timer pending (ReceiveCredits' flush
 * delay): the same Node timer is restarted with `refresh()` instead of a new one being made
 * each time, so arming it on the data path allocates nothing. Every delay must be the same.
 */
export class OneTimerClock implements Clock {
  readonly #delayMs: number;
  #timer: NodeJS.Timeout | undefined;
  #callback: (() => void) | undefined;
  readonly #handle = {};
  readonly #fire = (): void => {
    const cb = this.#callback;
    this.#callback = undefined;
    cb?.();
  };

  constructor(delayMs: number) {
    this.#delayMs = delayMs;
  }

  now(): number {
    return systemClock.now();
  }

  setTimer(callback: () => void, delayMs: number): unknown {
    if (delayMs !== this.#delayMs)
      throw new RangeError(`OneTimerClock: delay ${delayMs} ms, built for ${this.#delayMs}`);
    this.#callback = callback;
    if (this.#timer === undefined) this.#timer = setTimeout(this.#fire, this.#delayMs);
    else this.#timer.refresh();
    return this.#handle;
  }

  /** Cancels the pending callback; the Node timer may still fire, finding nothing to call. */
  clearTimer(handle: unknown): void {
    if (handle === this.#handle) this.#callback = undefined;
  }

  /** Stops the Node timer for good (the connection is gone). */
  dispose(): void {
    this.#callback = undefined;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

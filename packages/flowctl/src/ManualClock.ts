import type { Clock } from './Clock.js';
import { MinHeap } from './internal/MinHeap.js';
import { checkNumber } from './internal/validate.js';

interface ManualTimer {
  readonly at: number;
  readonly seq: number;
  readonly callback: () => void;
  cancelled: boolean;
  fired: boolean;
}

const earlier = (a: ManualTimer, b: ManualTimer): boolean =>
  a.at < b.at || (a.at === b.at && a.seq < b.seq);

/**
 * A virtual clock: time moves only when `advance`/`advanceTo`/`runNext` are called, and
 * timers fire in (time, creation) order. Deterministic; for tests and simulations.
 */
export class ManualClock implements Clock {
  private current: number;
  private seq = 0;
  private readonly timers = new MinHeap<ManualTimer>(earlier);
  private live = 0;

  constructor(start = 0) {
    this.current = checkNumber('start', start, Number.NEGATIVE_INFINITY);
  }

  now(): number {
    return this.current;
  }

  setTimer(callback: () => void, delayMs: number): unknown {
    const delay = Number.isFinite(delayMs) && delayMs > 0 ? delayMs : 0;
    const timer: ManualTimer = {
      at: this.current + delay,
      seq: this.seq++,
      callback,
      cancelled: false,
      fired: false,
    };
    this.live++;
    this.timers.push(timer);
    return timer;
  }

  clearTimer(handle: unknown): void {
    if (handle !== null && typeof handle === 'object' && 'cancelled' in handle) {
      const t = handle as ManualTimer;
      if (!t.cancelled && !t.fired) {
        t.cancelled = true;
        this.live--;
      }
    }
  }

  /** Number of timers not yet fired or cleared. */
  get pendingTimers(): number {
    return this.live;
  }

  /** Time of the next live timer, or undefined. */
  nextTimerAt(): number | undefined {
    this.dropCancelled();
    return this.timers.peek()?.at;
  }

  /** Fires the next live timer (moving time to it). Returns false when none is left. */
  runNext(): boolean {
    this.dropCancelled();
    const t = this.timers.pop();
    if (t === undefined) return false;
    this.fire(t);
    return true;
  }

  /** Moves time forward by `ms`, firing every timer due on the way, in order. */
  advance(ms: number): void {
    this.advanceTo(this.current + checkNumber('ms', ms, 0));
  }

  /** Moves time to `time` (never backwards), firing every timer due on the way. */
  advanceTo(time: number): void {
    checkNumber('time', time, Number.NEGATIVE_INFINITY);
    for (;;) {
      this.dropCancelled();
      const t = this.timers.peek();
      if (t === undefined || t.at > time) break;
      this.timers.pop();
      this.fire(t);
    }
    if (time > this.current) this.current = time;
  }

  private fire(t: ManualTimer): void {
    if (t.at > this.current) this.current = t.at;
    t.fired = true;
    this.live--;
    t.callback();
  }

  private dropCancelled(): void {
    for (;;) {
      const t = this.timers.peek();
      if (t === undefined || !t.cancelled) return;
      this.timers.pop();
    }
  }
}

import { type Clock, ManualClock } from '../../src/index.js';
import { Prng } from './Prng.js';

/**
 * A deterministic discrete-event simulator: virtual time (a `ManualClock`, so flowctl objects
 * given `sim.clock` run on it) and a seeded PRNG. Events at the same time run in the order
 * they were scheduled. Nothing here reads wall-clock time.
 */
export class EventSimulator {
  readonly clock: ManualClock;
  readonly rng: Prng;
  private executed = 0;

  constructor(seed: number) {
    this.clock = new ManualClock(0);
    this.rng = new Prng(seed);
  }

  get now(): number {
    return this.clock.now();
  }

  get eventsRun(): number {
    return this.executed;
  }

  /** The clock to hand to flowctl objects. */
  get asClock(): Clock {
    return this.clock;
  }

  /** Runs `fn` `delay` time units from now. */
  after(delay: number, fn: () => void): void {
    this.clock.setTimer(() => {
      this.executed++;
      fn();
    }, delay);
  }

  /** Runs events until none is left, `until` is passed, or `maxEvents` ran. Returns true if drained. */
  run(limits: { until?: number; maxEvents?: number } = {}): boolean {
    const until = limits.until ?? Number.POSITIVE_INFINITY;
    const maxEvents = limits.maxEvents ?? 50_000_000;
    for (;;) {
      const next = this.clock.nextTimerAt();
      if (next === undefined) return true;
      if (next > until || this.executed >= maxEvents) return false;
      this.clock.runNext();
    }
  }
}

/** Jain's fairness index of non-negative shares: 1 is perfectly fair, 1/n is one taker. */
export function jainIndex(xs: readonly number[]): number {
  let sum = 0;
  let sumSq = 0;
  for (const x of xs) {
    sum += x;
    sumSq += x * x;
  }
  return sumSq === 0 ? 1 : (sum * sum) / (xs.length * sumSq);
}

import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';
import type { GcCounts } from './GcCounts.js';

/**
 * This process's garbage collections so far, counted from V8's `gc` performance entries
 * (`kind` major = Mark-Compact, minor = Scavenge; every kind's duration adds to the pause).
 * A reader takes two snapshots and subtracts (`gcSince`).
 */
export class GcTally {
  readonly #counts = { major: 0, minor: 0, pauseMs: 0 };
  readonly #obs = new PerformanceObserver((list) => this.#add(list.getEntries()));
  #on = false;

  start(): this {
    if (!this.#on) this.#obs.observe({ entryTypes: ['gc'] });
    this.#on = true;
    return this;
  }

  stop(): void {
    this.#obs.disconnect();
    this.#on = false;
  }

  /**
   * The totals so far, including entries queued but not yet delivered to the observer. Node
   * queues a GC's entry on the turn of the event loop after the GC: one that ran in this very
   * turn counts from the next (`settled()`).
   */
  snapshot(): GcCounts {
    if (this.#on) this.#add(this.#obs.takeRecords());
    return { ...this.#counts };
  }

  /** The totals after one more turn of the event loop: the GCs of this turn included. */
  async settled(): Promise<GcCounts> {
    await new Promise((resolve) => setImmediate(resolve));
    return this.snapshot();
  }

  #add(entries: readonly PerformanceEntry[]): void {
    for (const e of entries) {
      const kind = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) this.#counts.major++;
      else if (kind === constants.NODE_PERFORMANCE_GC_MINOR) this.#counts.minor++;
      this.#counts.pauseMs += e.duration;
    }
  }
}

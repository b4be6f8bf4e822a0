import { performance } from 'node:perf_hooks';

/** Cumulative busy / idle time of the event loop, ms (performance.eventLoopUtilization()). */
export interface LoopTimes {
  readonly idle: number;
  readonly active: number;
}

/**
 * Default of PsClient option `oneSidedMaxLoad` on the soft provider (1 on others: PsClient's
 * `defaultMaxLoad`). `BENCH_EVAL_ONLY=fetch` evaluation, RDMA ÷ TCP
 * mean at 50 % of TCP's capacity / at gRPC's rate, 2 readers, interleaved, load average 6 → 2
 * from other jobs: no gate (6 runs) 0.78–2.38× / 0.37–0.68×, CPU 1.06–1.23× / 0.52–0.65×;
 * 0.25 (4 runs) 0.73–1.04× / 0.46–0.63×, CPU 1.02–1.15× / 0.56–0.63×; 0.5 (2) 2.21–2.22× /
 * 0.42–0.57×; 0.25 with 32 readers (4) 0.62–2.19× / 0.41–0.57×; 0.1 with 32 (2) 2.00–2.09× /
 * 0.66–0.71×. 0.25 bounds the busy case at little cost at the low rate.
 */
export const DEFAULT_ONE_SIDED_MAX_LOAD = 0.25;
/**
 * How long a load sample lasts, ms: short enough to follow a burst of pulls, long enough
 * that a sample spans many loop turns (and costs one ELU read per window, not per pull).
 */
export const LOAD_WINDOW_MS = 50;

/**
 * Opens one-sided fetches of large segments only while this client's event loop has time to
 * spare (small ones go one-sided regardless: option `oneSidedBusyMaxKeys`). A one-sided
 * fetch moves the shard's work onto the client (on soft the client's CPU does every READ), so
 * it wins while the client idles and loses once it is busy: then the shards share the work.
 * The load is the event loop utilization over the last window, computed lazily on the pull
 * path from two cumulative samples (no timer to clear, no allocation per pull).
 */
export class LoadGate {
  readonly maxLoad: number;
  readonly #times: () => LoopTimes;
  readonly #now: () => number;
  #at: number;
  #idle: number;
  #active: number;
  /** Utilization of the last whole window (0 until one passed). */
  #load = 0;

  /** `times` / `now` are injectable for tests (defaults: ELU and performance.now()). */
  constructor(
    maxLoad: number,
    times: () => LoopTimes = () => performance.eventLoopUtilization(),
    now: () => number = () => performance.now(),
  ) {
    this.maxLoad = maxLoad;
    this.#times = times;
    this.#now = now;
    const t = times();
    this.#at = now();
    this.#idle = t.idle;
    this.#active = t.active;
  }

  /** The event loop's utilization over the last window, 0..1. */
  get load(): number {
    const now = this.#now();
    if (now - this.#at >= LOAD_WINDOW_MS) {
      const t = this.#times();
      const active = t.active - this.#active;
      const total = active + (t.idle - this.#idle);
      if (total > 0) this.#load = Math.min(1, Math.max(0, active / total));
      this.#at = now;
      this.#idle = t.idle;
      this.#active = t.active;
    }
    return this.#load;
  }

  /** True when a pull may go one-sided: maxLoad 1 always, 0 never, else load below it. */
  open(): boolean {
    if (this.maxLoad >= 1) return true;
    return this.load < this.maxLoad;
  }
}

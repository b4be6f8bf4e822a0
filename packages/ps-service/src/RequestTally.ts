import type { RequestOutcome } from './ServiceMetrics.js';

/** Upper bounds (seconds) of `rdmajs_ps_request_duration_seconds`: 10 µs … 2 s. */
export const LATENCY_BUCKETS: readonly number[] = [
  1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.5, 2,
];

/**
 * One method's request figures not yet handed to prom-client: plain number fields added up
 * on the request path (no label objects, label hashing or validation per request), moved
 * into the prom-client metrics when they are read (their `collect()`, i.e. on scrape).
 * `take*` hand the pending amount over and zero it; a `*Seen` flag tells a figure that was
 * added to (even by 0, as prom-client's `inc(labels, 0)` creates the series) from one that
 * never was.
 */
export class RequestTally {
  ok = 0;
  refused = 0;
  error = 0;
  bytesIn = 0;
  bytesOut = 0;
  /** Requests answered: `bytesIn`/`bytesOut` were added to (by 0 too). */
  bytesSeen = false;
  keys = 0;
  keysSeen = false;
  /** Latency observations per bucket of LATENCY_BUCKETS, then those above the last bound. */
  readonly buckets = new Float64Array(LATENCY_BUCKETS.length + 1);
  latencySum = 0;
  latencyCount = 0;

  constructor(readonly method: string) {}

  /** A request answered: its latency (s), payload bytes in and out, keys (counted when > 0). */
  answered(seconds: number, bytesIn: number, bytesOut: number, keys: number): void {
    this.ok++;
    this.bytesIn += bytesIn;
    this.bytesOut += bytesOut;
    this.bytesSeen = true;
    if (keys > 0) {
      this.keys += keys;
      this.keysSeen = true;
    }
    let b = 0;
    while (b < LATENCY_BUCKETS.length && !(seconds <= (LATENCY_BUCKETS[b] as number))) b++;
    (this.buckets[b] as number)++;
    this.latencySum += seconds;
    this.latencyCount++;
  }

  /** A request that got an error reply (`refused`: validation failed, nothing applied). */
  failed(outcome: Exclude<RequestOutcome, 'ok'>): void {
    if (outcome === 'refused') this.refused++;
    else this.error++;
  }
}

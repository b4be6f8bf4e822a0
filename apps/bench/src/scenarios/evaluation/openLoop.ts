import type { LatencyRecorder } from '../../stats/LatencyRecorder.js';
import { OpenLoopLatency } from './OpenLoopLatency.js';
import { exponential, xorshift32 } from './random.js';

export interface OpenLoopOptions {
  /** Offered load, requests per second (Poisson arrivals). */
  rate: number;
  durationMs: number;
  /** Requests in flight beyond which an arrival is dropped and counted (the client is saturated). */
  maxOutstanding: number;
  seed: number;
}

export interface OpenLoopResult {
  /** Issue → completion of each request (every round's, when `rec` was given). */
  latency: LatencyRecorder;
  /** Scheduled arrival → issue: how far the client fell behind the offered load. */
  lag: LatencyRecorder;
  /** Scheduled arrival → completion: coordinated-omission corrected (lag + latency). */
  fromArrival: LatencyRecorder;
  completed: number;
  dropped: number;
  failed: number;
  seconds: number;
}

/**
 * Drives `request` with open-loop Poisson arrivals at `rate` for `durationMs`: arrivals do not
 * wait for earlier requests, so a slow transport queues up instead of being offered less. Node
 * timers have millisecond resolution, so arrivals due within the same millisecond are issued
 * together when the timer fires; each request's latency is measured from its issue, and the
 * scheduling lag (arrival → issue) is reported beside it, so the timer's granularity does not
 * count as transport latency while a client that cannot keep up still shows. `fromArrival`
 * measures from the scheduled arrival instead (coordinated-omission corrected: the wait of a
 * request the generator issued late counts). Dropped arrivals are counted, not timed.
 */
export async function runOpenLoop(
  request: (k: number) => Promise<void>,
  o: OpenLoopOptions,
  /** Where latencies go: a row measured in several rounds records them all into one. */
  rec = new OpenLoopLatency(),
): Promise<OpenLoopResult> {
  const next = xorshift32(o.seed);
  const meanGapMs = 1000 / o.rate;
  let outstanding = 0;
  let completed = 0;
  let dropped = 0;
  let failed = 0;
  let k = 0;
  const start = performance.now();
  const end = start + o.durationMs;
  let due = start + exponential(next, meanGapMs);
  let drained: (() => void) | undefined;
  const issue = (scheduled: number) => {
    if (outstanding >= o.maxOutstanding) {
      dropped++;
      return;
    }
    outstanding++;
    const t0 = performance.now();
    rec.issued(scheduled, t0);
    request(k++).then(
      () => {
        rec.completed(scheduled, t0, performance.now());
        completed++;
        if (--outstanding === 0) drained?.();
      },
      () => {
        failed++;
        if (--outstanding === 0) drained?.();
      },
    );
  };
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (due <= now && due < end) {
        issue(due);
        due += exponential(next, meanGapMs);
      }
      if (due >= end) return resolve();
      setTimeout(tick, Math.max(0, Math.floor(due - performance.now())));
    };
    tick();
  });
  if (outstanding > 0) await new Promise<void>((r) => (drained = r));
  return {
    latency: rec.service,
    lag: rec.lag,
    fromArrival: rec.fromArrival,
    completed,
    dropped,
    failed,
    seconds: (performance.now() - start) / 1000,
  };
}

import { LatencyRecorder } from '../../stats/LatencyRecorder.js';

/**
 * The latencies of an open-loop run, per request: issue → completion (what the transport
 * and servers took), scheduled arrival → issue (how far the load generator fell behind:
 * timer granularity, or a client too busy to issue), and scheduled arrival → completion,
 * the coordinated-omission-corrected latency a caller arriving on schedule would see.
 * Times are `performance.now()` milliseconds; recorders hold microseconds.
 */
export class OpenLoopLatency {
  /** Issue → completion. */
  readonly service = new LatencyRecorder();
  /** Scheduled arrival → issue, for every issued request (failed ones too). */
  readonly lag = new LatencyRecorder();
  /** Scheduled arrival → completion: service time plus the wait before issue. */
  readonly fromArrival = new LatencyRecorder();

  issued(scheduledMs: number, issuedMs: number): void {
    this.lag.record((issuedMs - scheduledMs) * 1000);
  }

  completed(scheduledMs: number, issuedMs: number, doneMs: number): void {
    this.service.record((doneMs - issuedMs) * 1000);
    this.fromArrival.record((doneMs - scheduledMs) * 1000);
  }
}

import type { Result } from '../report/Result.js';
import { LatencyRecorder } from './LatencyRecorder.js';

/**
 * One row measured in rounds interleaved with other rows (each round a full row of its own,
 * with its own warm-up): latency samples pooled into one distribution, CPU and heap summed
 * over every measured round trip, each round's p50 kept so a reader sees the spread.
 */
export class PooledRounds {
  readonly #latency = new LatencyRecorder();
  #first: Result | undefined;
  #iterations = 0;
  #cpuUs = 0;
  #heapBytes = 0;
  #gcCount = 0;
  #hasHeap = false;
  readonly #roundP50Us: number[] = [];

  /** A round's row and the recorder it filled (`iterations` measured round trips). */
  add(round: Result, rec: LatencyRecorder): void {
    this.#first ??= round;
    const n = rec.count;
    this.#latency.addAll(rec);
    this.#iterations += n;
    this.#cpuUs += round.cpuUsPerOp * n;
    if (typeof round.heapBytesPerOp === 'number' && typeof round.gcCount === 'number') {
      this.#hasHeap = true;
      this.#heapBytes += round.heapBytesPerOp * n;
      this.#gcCount += round.gcCount;
    }
    this.#roundP50Us.push(round.p50Us);
  }

  /** The pooled row: the first round's identity and extra fields, every round's samples. */
  result(): Result {
    const first = this.#first;
    if (first === undefined) throw new Error('a pooled row needs at least one round');
    const n = this.#iterations;
    return {
      ...first,
      ...this.#latency.summary(),
      cpuUsPerOp: n ? this.#cpuUs / n : 0,
      ...(this.#hasHeap ? { heapBytesPerOp: this.#heapBytes / n, gcCount: this.#gcCount } : {}),
      rounds: this.#roundP50Us.length,
      roundP50Us: [...this.#roundP50Us],
    };
  }
}

import { PerformanceObserver } from 'node:perf_hooks';

/**
 * Watches JS allocation over a measured loop: heap growth per operation and how many
 * garbage collections ran. Zero of both means the loop allocates nothing per operation.
 */
export class HeapMeter {
  #gcs = 0;
  #heap0 = 0;
  readonly #obs = new PerformanceObserver((list) => {
    this.#gcs += list.getEntries().length;
  });

  start(): void {
    this.#gcs = 0;
    this.#obs.observe({ entryTypes: ['gc'] });
    this.#heap0 = process.memoryUsage().heapUsed;
  }

  /** Ends the measurement (after `ops` operations). */
  stop(ops: number): { heapBytesPerOp: number; gcCount: number } {
    const heap = process.memoryUsage().heapUsed - this.#heap0;
    this.#obs.disconnect();
    return { heapBytesPerOp: Math.max(0, heap) / ops, gcCount: this.#gcs };
  }
}

import * as hdr from 'hdr-histogram-js';

/** Where the latency CDF of a row is sampled (the HTML report draws it). */
export const CDF_PERCENTILES: readonly number[] = [
  0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97.5, 99, 99.5, 99.9, 99.99, 100,
];

export interface LatencySummary {
  p50Us: number;
  meanUs: number;
  p99Us: number;
  p999Us: number;
  /** The latency at each of CDF_PERCENTILES. */
  cdf: { p: number; us: number }[];
}

/** Round-trip times in microseconds, recorded into an HDR histogram (no per-sample allocation). */
export class LatencyRecorder {
  readonly #h = hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 60_000_000,
    numberOfSignificantValueDigits: 3,
  });
  #sum = 0;
  #count = 0;

  /** Records one sample, in microseconds (kept at 0.01 µs resolution). */
  record(us: number): void {
    this.#h.recordValue(Math.max(1, Math.round(us * 100)));
    this.#sum += us;
    this.#count++;
  }

  /** Adds every sample `other` recorded (rounds of one row pooled into one distribution). */
  addAll(other: LatencyRecorder): void {
    this.#h.add(other.#h);
    this.#sum += other.#sum;
    this.#count += other.#count;
  }

  get count(): number {
    return this.#count;
  }

  summary(): LatencySummary {
    const at = (p: number) => this.#h.getValueAtPercentile(p) / 100;
    return {
      p50Us: at(50),
      meanUs: this.#count ? this.#sum / this.#count : 0,
      p99Us: at(99),
      p999Us: at(99.9),
      cdf: CDF_PERCENTILES.map((p) => ({ p, us: at(p) })),
    };
  }
}

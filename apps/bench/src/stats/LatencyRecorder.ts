import * as hdr from 'hdr-histogram-js';

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

  get count(): number {
    return this.#count;
  }

  summary(): { p50Us: number; meanUs: number; p99Us: number } {
    return {
      p50Us: this.#h.getValueAtPercentile(50) / 100,
      meanUs: this.#count ? this.#sum / this.#count : 0,
      p99Us: this.#h.getValueAtPercentile(99) / 100,
    };
  }
}

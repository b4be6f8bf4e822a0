import { uniform, xorshift32 } from './random.js';

/**
 * Keys drawn with Zipf popularity (rank r has weight 1 / r^s) over `n` keys, as embedding
 * lookups are: a few hot rows, a long tail. Ranks map to keys through a multiplicative hash,
 * so hot keys spread over the shards instead of all landing on one. Inverse-CDF sampling over
 * a table built once (8 bytes per key); a draw is a binary search, no allocation.
 */
export class ZipfKeys {
  readonly #cdf: Float64Array;
  readonly #next: () => number;

  constructor(
    readonly n: number,
    readonly exponent: number,
    seed: number,
  ) {
    this.#cdf = new Float64Array(n);
    let sum = 0;
    for (let r = 0; r < n; r++) {
      sum += 1 / (r + 1) ** exponent;
      this.#cdf[r] = sum;
    }
    for (let r = 0; r < n; r++) (this.#cdf as Float64Array)[r] = (this.#cdf[r] as number) / sum;
    this.#next = xorshift32(seed);
  }

  /** A popularity rank in [0, n). */
  rank(): number {
    const u = uniform(this.#next);
    const cdf = this.#cdf;
    let lo = 0;
    let hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((cdf[mid] as number) < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** The key of a rank: a bijection of [0, 2^32) (odd multiplier), + 1 so no key is 0. */
  static keyOf(rank: number): bigint {
    return BigInt((Math.imul(rank, 0x9e3779b1) >>> 0) + 1);
  }

  /** Fills `out` with keys drawn independently (a batch may repeat a hot key, as real ones do). */
  fill(out: BigUint64Array): BigUint64Array {
    for (let i = 0; i < out.length; i++) out[i] = ZipfKeys.keyOf(this.rank());
    return out;
  }
}

import { invalidArg } from './errors.js';
import { hash64 } from './internal/mix.js';

const SALTS = [
  0x9e3779b9, 0x85ebca6b, 0xc2b2ae35, 0x27d4eb2f, 0x165667b1, 0xd3a2646c, 0xfd7046c5, 0xb55a4f09,
];

/**
 * Count-min sketch of push frequencies with saturating 16-bit counters: estimates never
 * undercount, so a key pushed `threshold` times is always admitted; collisions can only admit
 * a key early. Seeds are fixed so a restored sketch keeps counting the same way.
 */
export class CountMinSketch {
  readonly width: number;
  readonly depth: number;
  readonly counters: Uint16Array;
  readonly #mask: number;

  constructor(width: number, depth: number, counters?: Uint16Array) {
    if (!Number.isInteger(width) || width < 16 || width > 2 ** 26 || (width & (width - 1)) !== 0)
      throw invalidArg('admission width must be a power of two in [16, 2^26]');
    if (!Number.isInteger(depth) || depth < 1 || depth > SALTS.length)
      throw invalidArg(`admission depth must be an integer in [1, ${SALTS.length}]`);
    this.width = width;
    this.depth = depth;
    this.#mask = width - 1;
    this.counters = counters ?? new Uint16Array(width * depth);
    if (this.counters.length !== width * depth)
      throw invalidArg('sketch counters have the wrong length');
  }

  get bytes(): number {
    return this.counters.byteLength;
  }

  /** Current estimate for key (lo, hi). */
  estimate(lo: number, hi: number): number {
    let min = 0xffff;
    for (let d = 0; d < this.depth; d++) {
      const c = this.counters[
        d * this.width + (hash64(lo, hi, SALTS[d] as number) & this.#mask)
      ] as number;
      if (c < min) min = c;
    }
    return min;
  }

  /** Counts one occurrence (conservative update) and returns the new estimate. */
  add(lo: number, hi: number): number {
    const est = this.estimate(lo, hi);
    const next = est < 0xffff ? est + 1 : est;
    for (let d = 0; d < this.depth; d++) {
      const i = d * this.width + (hash64(lo, hi, SALTS[d] as number) & this.#mask);
      if ((this.counters[i] as number) < next) this.counters[i] = next;
    }
    return next;
  }
}

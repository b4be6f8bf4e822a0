import { uniform, xorshift32 } from './random.js';

/** One batch size and how often requests have it. */
export interface BatchWeight {
  keys: number;
  weight: number;
}

/**
 * Keys per request for the inference fetch: mostly small lookups, some large ones (a
 * ranking request gathers hundreds of rows). Mean ≈ 150 keys.
 */
export const INFERENCE_BATCHES: readonly BatchWeight[] = [
  { keys: 1, weight: 0.1 },
  { keys: 16, weight: 0.3 },
  { keys: 64, weight: 0.3 },
  { keys: 256, weight: 0.2 },
  { keys: 1024, weight: 0.1 },
];

/** Draws batch sizes from a weighted mix, seeded. */
export class BatchMix {
  readonly #cum: Float64Array;
  readonly #next: () => number;

  constructor(
    readonly batches: readonly BatchWeight[],
    seed: number,
  ) {
    const total = batches.reduce((a, b) => a + b.weight, 0);
    let acc = 0;
    this.#cum = Float64Array.from(batches, (b) => {
      acc += b.weight / total;
      return acc;
    });
    this.#next = xorshift32(seed);
  }

  /** The index (into `batches`) of the next request's size. */
  draw(): number {
    const u = uniform(this.#next);
    for (let i = 0; i < this.#cum.length; i++) if (u < (this.#cum[i] as number)) return i;
    return this.#cum.length - 1;
  }

  /** The mean batch size. */
  get meanKeys(): number {
    const total = this.batches.reduce((a, b) => a + b.weight, 0);
    return this.batches.reduce((a, b) => a + (b.keys * b.weight) / total, 0);
  }
}

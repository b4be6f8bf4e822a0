/** Keys are drawn from 1..KEY_SPACE. */
const KEY_SPACE = 1_000_000;
/** Key batches of a row, used in turn: call k sends batch k % DISTINCT_BATCHES. */
export const DISTINCT_BATCHES = 16;

/** The table of `dim`-wide rows (the ps scenario has one per measured dim). */
export const psTableName = (dim: number): string => `emb${dim}`;

/**
 * The key batches of one row, from a seed (xorshift32): the same seed gives the same keys in
 * every process, so each transport's client (in its own process) pulls and pushes the same rows.
 */
export function keyBatches(batch: number, seed: number): BigUint64Array[] {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % KEY_SPACE;
  };
  return Array.from({ length: DISTINCT_BATCHES }, () =>
    BigUint64Array.from({ length: batch }, () => BigInt(next() + 1)),
  );
}

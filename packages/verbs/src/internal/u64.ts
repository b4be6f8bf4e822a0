/**
 * A 64-bit device limit as an exact bigint. The addon hands some as doubles: below 2^53
 * they are exact, and a double of 2^64 or more can only be the all-ones "no limit".
 */
export function exactU64(v: number | bigint): bigint {
  if (typeof v === 'bigint') return v;
  if (v >= 2 ** 64) return 2n ** 64n - 1n;
  return BigInt(Math.trunc(v));
}

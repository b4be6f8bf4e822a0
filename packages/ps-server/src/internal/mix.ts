// 32-bit integer mixing shared by the hash index, the count-min sketch and seeded init.

/** murmur3's finalizer: a bijective avalanche of a 32-bit value. */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Hash of a u64 given as (lo, hi) 32-bit halves, mixed with a 32-bit salt. */
export function hash64(lo: number, hi: number, salt: number): number {
  return fmix32((lo ^ fmix32((hi ^ salt) >>> 0)) >>> 0);
}

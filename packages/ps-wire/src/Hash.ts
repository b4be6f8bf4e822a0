// 32-bit integer mixing: the store's hash index (ps-server HashIndex, the count-min sketch),
// seeded init (KeyInit) and the one-sided reader, which must find a key's bucket exactly as
// the store placed it. ps-server/native/kernels.cc (Fmix32, Hash64) mirrors both functions;
// the native-kernels tests compare them.

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

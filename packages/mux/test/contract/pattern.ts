/** Seeded test data: the same (seed, channel, index) always gives the same bytes. */

/** mulberry32: small, fast, good enough to pick sizes and fill bytes. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Fills `out` with bytes derived from `key` (words of an xorshift stream). */
export function fillPattern(out: Uint8Array, key: number): Uint8Array {
  let x = (key * 2654435761) >>> 0 || 1;
  const words = out.length >>> 2;
  if (out.byteOffset % 4 === 0) {
    const view = new Uint32Array(out.buffer, out.byteOffset, words);
    for (let i = 0; i < words; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      view[i] = x >>> 0;
    }
  } else {
    for (let i = 0; i < words; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      out[i * 4] = x & 0xff;
      out[i * 4 + 1] = (x >>> 8) & 0xff;
      out[i * 4 + 2] = (x >>> 16) & 0xff;
      out[i * 4 + 3] = (x >>> 24) & 0xff;
    }
  }
  for (let i = words * 4; i < out.length; i++) out[i] = (key + i) & 0xff;
  return out;
}

/** Message sizes from 1 B to `max`, log-uniform, always including both ends. */
export function sizeMix(seed: number, count: number, max: number): number[] {
  const r = prng(seed);
  const sizes = [1, max];
  const lnMax = Math.log(max);
  while (sizes.length < count) sizes.push(Math.max(1, Math.floor(Math.exp(r() * lnMax))));
  // Shuffle so the large ones are not all at the start.
  for (let i = sizes.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [sizes[i], sizes[j]] = [sizes[j] as number, sizes[i] as number];
  }
  return sizes;
}

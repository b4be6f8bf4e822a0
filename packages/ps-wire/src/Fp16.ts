// IEEE half precision: the optional fp16 row storage of the store (ps-server) and the one-sided
// reader that decodes those rows (StoreViewReader). Node 20 has no Float16Array.
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 value → binary16 bits, round to nearest even; overflow → ±Inf, NaN kept. */
export function toHalf(v: number): number {
  f32[0] = v;
  const x = u32[0] as number;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let r = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    if (rem > half || (rem === half && r & 1)) r++;
    return sign | r;
  }
  let r = mant >>> 13;
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && r & 1)) {
    r++;
    if (r === 0x400) {
      r = 0;
      e++;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | r;
}

/** binary16 bits → float32, through a 64 Ki table (256 KiB, built once). */
export const HALF_TO_FLOAT: Float32Array = (() => {
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const s = h & 0x8000 ? -1 : 1;
    const e = (h >>> 10) & 0x1f;
    const m = h & 0x3ff;
    if (e === 0) t[h] = s * m * 2 ** -24;
    else if (e === 0x1f) t[h] = m ? Number.NaN : s * Number.POSITIVE_INFINITY;
    else t[h] = s * (1 + m / 1024) * 2 ** (e - 15);
  }
  return t;
})();

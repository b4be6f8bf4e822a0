import { randomBytes } from 'node:crypto';

/** Whether u32 halves of a key are a view of its memory (lo then hi), not a copy. */
export const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
/** Per-process salt: the probe sequence does not depend on the key values alone. */
const SALT = randomBytes(4).readUInt32LE(0);

function mix(lo: number, hi: number): number {
  let h = (lo ^ SALT ^ Math.imul(hi, 0x9e3779b1)) >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** u32 halves of the keys, lo then hi for each (a view on little-endian hosts). */
export function halvesOf(keys: BigUint64Array): Uint32Array {
  if (LITTLE_ENDIAN) return new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2);
  const out = new Uint32Array(keys.length * 2);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i] as bigint;
    out[2 * i] = Number(k & 0xffff_ffffn);
    out[2 * i + 1] = Number(k >> 32n);
  }
  return out;
}

export interface Deduped {
  /** The distinct keys, in order of first appearance. */
  unique: BigUint64Array;
  /** For each requested key, its index in `unique`. */
  uniqueOf: Uint32Array;
}

/**
 * Distinct keys of a batch by open addressing over their u32 halves: no bigint arithmetic
 * and no Map of bigints (≈ 10× faster at 4096 keys).
 */
export function dedupe(keys: BigUint64Array): Deduped {
  const n = keys.length;
  const h = halvesOf(keys);
  let cap = 16;
  while (cap < 2 * n) cap *= 2;
  const mask = cap - 1;
  const table = new Int32Array(cap); // 0: empty, else unique index + 1
  const firstAt = new Uint32Array(n);
  const uniqueOf = new Uint32Array(n);
  let count = 0;
  for (let i = 0; i < n; i++) {
    const lo = h[2 * i] as number;
    const hi = h[2 * i + 1] as number;
    let slot = mix(lo, hi) & mask;
    for (;;) {
      const e = table[slot] as number;
      if (e === 0) {
        table[slot] = count + 1;
        firstAt[count] = i;
        uniqueOf[i] = count++;
        break;
      }
      const j = firstAt[e - 1] as number;
      if (h[2 * j] === lo && h[2 * j + 1] === hi) {
        uniqueOf[i] = e - 1;
        break;
      }
      slot = (slot + 1) & mask;
    }
  }
  const unique = new BigUint64Array(count);
  const uh = LITTLE_ENDIAN ? new Uint32Array(unique.buffer) : undefined;
  for (let u = 0; u < count; u++) {
    const i = firstAt[u] as number;
    if (uh !== undefined) {
      uh[2 * u] = h[2 * i] as number;
      uh[2 * u + 1] = h[2 * i + 1] as number;
    } else unique[u] = keys[i] as bigint;
  }
  return { unique, uniqueOf };
}

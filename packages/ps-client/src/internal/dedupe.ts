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

/**
 * Distinct keys of a batch by open addressing over their u32 halves: no bigint arithmetic
 * and no Map of bigints (≈ 10× faster at 4096 keys). Its arrays are reused from batch to
 * batch (a pull would otherwise allocate the probe table and two index arrays per call):
 * `firstAt` and `uniqueOf` hold the last batch's answer until the next `run`.
 */
export class Deduper {
  #table = new Int32Array(16); // 0: empty, else unique index + 1
  /** For each distinct key u (in order of first appearance), the index of its first occurrence. */
  firstAt = new Uint32Array(16);
  /** For each key of the batch, its distinct index u. */
  uniqueOf = new Uint32Array(16);

  /** De-duplicates the `n` keys whose halves are `h` (see halvesOf); returns how many are distinct. */
  run(h: Uint32Array, n: number): number {
    let cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (this.#table.length < cap) this.#table = new Int32Array(cap);
    else this.#table.fill(0, 0, cap);
    if (this.firstAt.length < n) {
      this.firstAt = new Uint32Array(n);
      this.uniqueOf = new Uint32Array(n);
    }
    const table = this.#table;
    const firstAt = this.firstAt;
    const uniqueOf = this.uniqueOf;
    const mask = cap - 1;
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
    return count;
  }
}

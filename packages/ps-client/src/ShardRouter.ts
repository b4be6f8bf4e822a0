import { fmix32 } from '@rdmajs/ps-wire';
import { PsClientError } from './errors.js';

const C1 = 0xcc9e2d51;
const C2 = 0x1b873593;

/** MurmurHash3's scramble of one 4-byte block: independent of the seed and the state. */
function scramble(k: number): number {
  k = Math.imul(k, C1);
  k = (k << 15) | (k >>> 17);
  return Math.imul(k, C2);
}

/** MurmurHash3's mix of a scrambled block into the state. */
function mixScrambled(h: number, k: number): number {
  h ^= k;
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

/** The score of a key whose blocks are scrambled already (`scramble(lo)`, `scramble(hi)`). */
function scoreOfScrambled(klo: number, khi: number, seed: number): number {
  return fmix32(mixScrambled(mixScrambled(seed | 0, klo), khi) ^ 8);
}

/** MurmurHash3 (x86, 32-bit) of the 8 bytes lo ‖ hi under `seed`: a key's score for one shard. */
export function rendezvousScore(lo: number, hi: number, seed: number): number {
  return scoreOfScrambled(scramble(lo), scramble(hi), seed);
}

/** A shard's seed: FNV-1a of its id, finalised. */
export function shardSeed(id: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  return fmix32(h);
}

/**
 * Rendezvous (highest-random-weight) hashing over shard ids: a key goes to the shard whose
 * score for it is highest. Adding a shard moves only the keys the new shard wins (≈ 1/N of
 * them) and removing one moves only its own keys; no virtual nodes or ring to keep. O(shards)
 * per key, fine for tens of shards.
 */
export class ShardRouter {
  readonly ids: readonly string[];
  readonly #seeds: Int32Array;

  constructor(ids: readonly string[]) {
    if (!Array.isArray(ids) || ids.length === 0) {
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'a router needs at least one shard');
    }
    if (new Set(ids).size !== ids.length) {
      throw new PsClientError('ERR_PS_CLIENT_INVALID_ARG', 'shard ids must be distinct');
    }
    this.ids = [...ids];
    this.#seeds = Int32Array.from(ids, shardSeed);
  }

  /** The shard index of the key with halves (lo, hi). */
  shardOfHalves(lo: number, hi: number): number {
    const seeds = this.#seeds;
    // The key's blocks are scrambled once, not once per shard (the score is the same).
    const klo = scramble(lo);
    const khi = scramble(hi);
    // Scores compared as int32 with the top bit flipped (the same order as unsigned): small
    // integers all through, no float compare per shard. Ties go to the lower index, as before.
    const S = seeds.length;
    let best = 0;
    let bestScore = (scoreOfScrambled(klo, khi, seeds[0] as number) ^ 0x8000_0000) | 0;
    for (let s = 1; s < S; s++) {
      const sc = (scoreOfScrambled(klo, khi, seeds[s] as number) ^ 0x8000_0000) | 0;
      if (sc > bestScore) {
        bestScore = sc;
        best = s;
      }
    }
    return best;
  }

  shardOf(key: bigint): number {
    return this.shardOfHalves(Number(key & 0xffff_ffffn) | 0, Number(key >> 32n) | 0);
  }

  /** Shard index of every key, into `out` (no bigint arithmetic per key). */
  route(keys: BigUint64Array, out: Uint32Array = new Uint32Array(keys.length)): Uint32Array {
    const halves = halvesOf(keys);
    for (let i = 0; i < keys.length; i++) {
      out[i] = this.shardOfHalves(halves[2 * i] as number, halves[2 * i + 1] as number);
    }
    return out;
  }

  /** The shard of a named dense tensor. */
  shardOfName(name: string): number {
    const h = shardSeed(name);
    return this.shardOfHalves(h, fmix32(h ^ 0x5bd1e995));
  }
}

const LE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** (lo, hi) u32 halves of each key as an Int32Array-compatible view (copy on big-endian hosts). */
function halvesOf(keys: BigUint64Array): Int32Array {
  if (LE) return new Int32Array(keys.buffer, keys.byteOffset, keys.length * 2);
  const out = new Int32Array(keys.length * 2);
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i] as bigint;
    out[2 * i] = Number(k & 0xffff_ffffn) | 0;
    out[2 * i + 1] = Number(k >> 32n) | 0;
  }
  return out;
}

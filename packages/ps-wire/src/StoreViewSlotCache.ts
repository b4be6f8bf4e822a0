import { PsWireError } from './errors.js';

/** Entries per set: a key lives in one of these positions of its set. */
const WAYS = 4;

/**
 * Key → slot hints for StoreViewReader (shared by the readers of one table on one shard): a
 * key read through the index before is read next time as meta, row, meta straight away — no
 * index window, one round. A hint is never trusted: the reader accepts the row only under the
 * seqlock rule (both metas the same even seq, the key, live) within the generation the hint
 * was learned in, else drops it and reads the key through the index. This works because the
 * store never has a key live in two slots at once (eviction marks the slot not live before it
 * is reused; a load bumps the generation, publishes each fresh slot with its restored row in
 * one seqlock section, then bumps the generation again).
 *
 * Fixed memory: `capacity` entries in typed arrays (17 B each), 4-way set associative, nothing allocated
 * per key. A full set replaces by second chance (CLOCK): an entry used since it was last
 * passed over stays, so Zipf-hot keys are not pushed out by the one-off keys of the tail. Keys come from this process, so no salt is needed:
 * colliding keys only cost hits.
 */
export class StoreViewSlotCache {
  readonly capacity: number;
  /** Accepted rows read through a hint (cached reads). */
  hits = 0;
  /** Hints that did not hold (slot reused, key evicted, a write in flight, generation moved). */
  stale = 0;
  readonly #lo: Uint32Array;
  readonly #hi: Uint32Array;
  /** Slot per entry, −1 empty. */
  readonly #slot: Int32Array;
  /** Per entry: looked up since the replacement last passed it (its second chance). */
  readonly #used: Uint8Array;
  /**
   * Per entry: the generation it was learned in. An entry of another generation is no hint,
   * so a moved generation costs nothing up front (a shard flipping it every batch cannot
   * make each batch clear the whole cache).
   */
  readonly #learned: Uint32Array;
  readonly #setMask: number;
  #victim = 0;
  /** The table generation the entries were learned in. */
  #gen = 0;

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < WAYS || capacity > 1 << 22)
      throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', `slot cache capacity in [${WAYS}, 2^22]`);
    // Sets are a power of two (a mask picks one); capacity is rounded down to whole sets.
    const sets = 2 ** Math.floor(Math.log2(capacity / WAYS));
    this.capacity = sets * WAYS;
    this.#setMask = sets - 1;
    this.#lo = new Uint32Array(this.capacity);
    this.#hi = new Uint32Array(this.capacity);
    this.#slot = new Int32Array(this.capacity).fill(-1);
    this.#used = new Uint8Array(this.capacity);
    this.#learned = new Uint32Array(this.capacity);
  }

  get generation(): number {
    return this.#gen;
  }

  #set(lo: number, hi: number): number {
    const h = Math.imul(lo ^ Math.imul(hi, 0x85ebca6b), 0x9e3779b1);
    return ((h ^ (h >>> 15)) & this.#setMask) * WAYS;
  }

  /** The hinted slot of the key, or −1. */
  lookup(lo: number, hi: number): number {
    const at = this.#set(lo, hi);
    for (let j = at; j < at + WAYS; j++)
      if (
        this.#lo[j] === lo &&
        this.#hi[j] === hi &&
        (this.#slot[j] as number) >= 0 &&
        this.#learned[j] === this.#gen
      ) {
        this.#used[j] = 1;
        return this.#slot[j] as number;
      }
    return -1;
  }

  /** Remembers the key's slot, learned in `generation` (ignored unless it is the cache's). */
  remember(lo: number, hi: number, slot: number, generation: number): void {
    if (generation !== this.#gen) return;
    const at = this.#set(lo, hi);
    let free = -1;
    for (let j = at; j < at + WAYS; j++) {
      const live = (this.#slot[j] as number) >= 0 && this.#learned[j] === this.#gen;
      if (live && this.#lo[j] === lo && this.#hi[j] === hi) {
        this.#slot[j] = slot;
        return;
      }
      if (!live && free < 0) free = j;
    }
    const j = free >= 0 ? free : this.#victimIn(at);
    this.#lo[j] = lo;
    this.#hi[j] = hi;
    this.#slot[j] = slot;
    this.#used[j] = 0;
    this.#learned[j] = this.#gen;
  }

  /** The entry of a full set to replace: the first not used since passed (≤ 2 turns). */
  #victimIn(at: number): number {
    const used = this.#used;
    for (let t = 0; t < 2 * WAYS; t++) {
      const j = at + (this.#victim++ & (WAYS - 1));
      if (used[j] === 0) return j;
      used[j] = 0;
    }
    return at; // unreachable: a second turn finds every mark cleared
  }

  /** Drops the key's hint if it still names `slot` (another reader may have renewed it). */
  forget(lo: number, hi: number, slot: number): void {
    const at = this.#set(lo, hi);
    for (let j = at; j < at + WAYS; j++)
      if (this.#slot[j] === slot && this.#lo[j] === lo && this.#hi[j] === hi) this.#slot[j] = -1;
  }

  /**
   * A read saw the table at `generation`: hints of any other no longer count (O(1)). Only
   * forward (mod 2^32): a slower reader of the older generation does not bring its hints back.
   */
  observe(generation: number): void {
    const g = generation >>> 0;
    if (((g - this.#gen) | 0) > 0) this.#gen = g;
  }

  /** Drops every hint (a new descriptor, connection or header: perhaps another table). */
  clear(generation = 0): void {
    this.#slot.fill(-1);
    this.#learned.fill(0);
    this.#gen = generation >>> 0;
  }
}

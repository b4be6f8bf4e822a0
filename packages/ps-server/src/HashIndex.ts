import { invalidArg } from './errors.js';
import { ABI } from './internal/abi.js';
import { hash64 } from './internal/mix.js';

const EMPTY = ABI.IDX_EMPTY;
/** A bucket of the old table whose entry moved or was deleted; probes pass over it. */
const GONE = ABI.IDX_GONE;
/** Tag bytes mirrored past the last bucket, so a native probe reads 16 tags from any bucket. */
const TAG_PAD = ABI.IDX_TAG_PAD;
/** Int32 words per bucket: key lo, key hi, slot (store view BUCKET_BYTES / 4). */
const W = ABI.IDX_BUCKET_INTS;

/**
 * A bucket's tag: a byte of its key's hash that the bucket position does not use (for tables
 * under 2^24 buckets), never IDX_TAG_EMPTY. The native probe compares 16 tags at once and
 * reads a bucket only where its tag matches: one predictable branch per lookup instead of one
 * per bucket of a linear-probe chain (kernels.cc TagOf is the same function).
 */
export function tagOf(hash: number): number {
  const t = hash >>> 24;
  return t === ABI.IDX_TAG_EMPTY ? 1 : t;
}
/**
 * Old buckets visited per insert while growing. A grow at load 0.7 leaves 0.7·B inserts
 * before the next one and B old buckets to visit, so 4 per insert always finishes first.
 */
const MIGRATE_STEP = 4;

export interface HashIndexOptions {
  /** Initial bucket count (rounded up to a power of two). Default 16. */
  initialBuckets?: number;
  /** Grow when entries exceed this fraction of the buckets. Default 0.7. */
  maxLoad?: number;
  /** Never grow (a budgeted table sizes the index for its row limit up front). */
  fixed?: boolean;
  /** Hash salt; random by default so peers cannot aim keys at one probe chain. */
  salt?: number;
  /**
   * Called with each new bucket array before it is first written: SparseTable asks the
   * kernels addon for transparent huge pages there (probes of a large index are TLB misses).
   */
  advise?: (fresh: Int32Array) => void;
  /**
   * The bucket and tag arrays to use (a fixed index placed in a one-sided readable table's
   * store view): `initialBuckets` × IDX_BUCKET_INTS int32 and buckets + IDX_TAG_PAD bytes, filled here.
   */
  arrays?: { buckets: Int32Array; tags: Uint8Array };
}

function pow2AtLeast(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

function table(buckets: number, advise: ((fresh: Int32Array) => void) | undefined): Int32Array {
  const b = new Int32Array(buckets * W);
  advise?.(b);
  for (let i = 2; i < b.length; i += W) b[i] = EMPTY;
  return b;
}

/** Tag bytes of a table of `buckets` buckets: one per bucket, then the mirror. */
function tagTable(buckets: number): Uint8Array {
  return new Uint8Array(buckets + TAG_PAD);
}

/** Sets bucket i's tag and its mirrors (tags[p] equals tags[p & mask] for every p). */
function putTag(tags: Uint8Array, i: number, buckets: number, tag: number): void {
  tags[i] = tag;
  for (let p = i + buckets; p < tags.length; p += buckets) tags[p] = tag;
}

/**
 * u64 key → non-negative int32 value, open addressing with linear probing over one typed
 * array of [lo, hi, value] buckets (12 bytes each, so a probe is one cache line), with a tag
 * byte per bucket beside it (tagOf; IDX_TAG_EMPTY for an empty bucket) for the native probes.
 * Growth is incremental: a doubled table is allocated and the old buckets move a few per
 * insert, so no call pays for a whole rehash. While moving, lookups try the new table, then
 * the old one (whose probes are plain: it has no tags).
 */
export class HashIndex {
  #b: Int32Array;
  #tags: Uint8Array;
  #mask: number;
  #old: Int32Array | null = null;
  #oldMask = 0;
  #migratePos = 0;
  #size = 0;
  #generation = 0;
  readonly #maxLoad: number;
  readonly #fixed: boolean;
  readonly #salt: number;
  readonly #advise: ((fresh: Int32Array) => void) | undefined;

  constructor(options: HashIndexOptions = {}) {
    const buckets = pow2AtLeast(Math.max(2, options.initialBuckets ?? 16));
    const maxLoad = options.maxLoad ?? 0.7;
    if (!(maxLoad > 0 && maxLoad < 1)) throw invalidArg('maxLoad must be in (0, 1)');
    if (buckets > 2 ** 29) throw invalidArg('too many buckets');
    this.#maxLoad = maxLoad;
    this.#fixed = options.fixed ?? false;
    this.#salt = (options.salt ?? Math.floor(Math.random() * 2 ** 32)) >>> 0;
    this.#advise = options.advise;
    const given = options.arrays;
    if (given !== undefined) {
      if (!this.#fixed || given.buckets.length !== buckets * W)
        throw invalidArg('given index arrays need a fixed index of their size');
      if (given.tags.length !== buckets + TAG_PAD) throw invalidArg('tag array size');
      for (let i = 2; i < given.buckets.length; i += W) given.buckets[i] = EMPTY;
      given.tags.fill(ABI.IDX_TAG_EMPTY);
    }
    this.#b = given?.buckets ?? table(buckets, this.#advise);
    this.#tags = given?.tags ?? tagTable(buckets);
    this.#mask = buckets - 1;
  }

  /** Buckets needed to hold `entries` without growing at this load factor. */
  static bucketsFor(entries: number, maxLoad = 0.7): number {
    return pow2AtLeast(Math.max(2, Math.floor(entries / maxLoad) + 1));
  }

  /** Bytes of a table of `buckets` buckets (buckets and tags). */
  static bytesFor(buckets: number): number {
    return buckets * (4 * W + 1) + TAG_PAD;
  }

  get size(): number {
    return this.#size;
  }

  get buckets(): number {
    return this.#mask + 1;
  }

  get growing(): boolean {
    return this.#old !== null;
  }

  /** Changes whenever the bucket arrays of probeTables() are replaced (grow, growth done). */
  get generation(): number {
    return this.#generation;
  }

  /**
   * The live bucket arrays ([lo, hi, value] × buckets, EMPTY -1, GONE -2 in the old one), the
   * new table's tags (buckets + IDX_TAG_PAD bytes) and the salt, for native probes
   * (SparseTable's kernels); valid until `generation` changes.
   */
  probeTables(): { buckets: Int32Array; tags: Uint8Array; old: Int32Array | null; salt: number } {
    return { buckets: this.#b, tags: this.#tags, old: this.#old, salt: this.#salt };
  }

  /** Bytes of the typed arrays held now (both tables while growing). */
  get bytes(): number {
    return (
      this.#b.byteLength + this.#tags.byteLength + (this.#old === null ? 0 : this.#old.byteLength)
    );
  }

  /** The value of key (lo, hi), or -1. */
  get(lo: number, hi: number): number {
    const b = this.#b;
    const mask = this.#mask;
    const l = lo | 0;
    const h = hi | 0;
    let i = hash64(lo, hi, this.#salt) & mask;
    for (;;) {
      const p = i * W;
      const v = b[p + 2] as number;
      if (v === EMPTY) break;
      if (b[p] === l && b[p + 1] === h) return v;
      i = (i + 1) & mask;
    }
    if (this.#old === null) return EMPTY;
    const o = this.#findOld(l, h, hash64(lo, hi, this.#salt));
    return o < 0 ? EMPTY : ((this.#old as Int32Array)[o + 2] as number);
  }

  // Position (×W) of the live old-table bucket of key, or -1.
  #findOld(l: number, h: number, hash: number): number {
    const b = this.#old as Int32Array;
    const mask = this.#oldMask;
    let i = hash & mask;
    for (;;) {
      const p = i * W;
      const v = b[p + 2] as number;
      if (v === EMPTY) return -1;
      if (v !== GONE && b[p] === l && b[p + 1] === h) return p;
      i = (i + 1) & mask;
    }
  }

  /** Sets key (lo, hi) to `value` (≥ 0), inserting it if absent. */
  set(lo: number, hi: number, value: number): void {
    const l = lo | 0;
    const h = hi | 0;
    const hash = hash64(lo, hi, this.#salt);
    const b = this.#b;
    const mask = this.#mask;
    let i = hash & mask;
    for (;;) {
      const p = i * W;
      if (b[p + 2] === EMPTY) break;
      if (b[p] === l && b[p + 1] === h) {
        b[p + 2] = value;
        return;
      }
      i = (i + 1) & mask;
    }
    if (this.#old !== null) {
      const o = this.#findOld(l, h, hash);
      if (o >= 0) {
        this.#old[o + 2] = GONE;
        this.#size--;
      }
    }
    if (this.#size + 1 > this.#maxLoad * (mask + 1)) {
      if (this.#fixed) throw invalidArg('fixed-size index is full');
      this.#grow();
      this.set(lo, hi, value);
      return;
    }
    const p = i * W;
    // The key before the value: a one-sided reader that sees the value takes the bucket as
    // this key's (or checks the slot's meta key, which catches the rest).
    b[p] = l;
    b[p + 1] = h;
    b[p + 2] = value;
    putTag(this.#tags, i, mask + 1, tagOf(hash));
    this.#size++;
    if (this.#old !== null) this.#migrate(MIGRATE_STEP);
  }

  /**
   * Moves up to 4·n old buckets while growing (readers call it too, so a table that stops
   * taking inserts still finishes its growth and stops probing two tables).
   */
  advanceGrowth(n: number): void {
    if (this.#old !== null) this.#migrate(4 * n);
  }

  /** Removes key (lo, hi); returns whether it was there. */
  delete(lo: number, hi: number): boolean {
    const l = lo | 0;
    const h = hi | 0;
    const hash = hash64(lo, hi, this.#salt);
    const b = this.#b;
    const mask = this.#mask;
    let i = hash & mask;
    for (;;) {
      const p = i * W;
      if (b[p + 2] === EMPTY) break;
      if (b[p] === l && b[p + 1] === h) {
        this.#backShift(i);
        this.#size--;
        return true;
      }
      i = (i + 1) & mask;
    }
    if (this.#old !== null) {
      const o = this.#findOld(l, h, hash);
      if (o >= 0) {
        // A tombstone, not a shift: shifting could move an entry behind the migration cursor.
        this.#old[o + 2] = GONE;
        this.#size--;
        return true;
      }
    }
    return false;
  }

  /** Calls fn(lo, hi, value) for every entry (order unspecified). */
  forEach(fn: (lo: number, hi: number, value: number) => void): void {
    for (const b of this.#old === null ? [this.#b] : [this.#b, this.#old]) {
      for (let p = 0; p < b.length; p += W) {
        const v = b[p + 2] as number;
        if (v >= 0) fn((b[p] as number) >>> 0, (b[p + 1] as number) >>> 0, v);
      }
    }
  }

  // Backward-shift deletion keeps linear-probe chains intact without tombstones.
  #backShift(hole: number): void {
    const b = this.#b;
    const tags = this.#tags;
    const mask = this.#mask;
    let i = hole;
    let j = hole;
    for (;;) {
      j = (j + 1) & mask;
      const q = j * W;
      if (b[q + 2] === EMPTY) break;
      const home = hash64((b[q] as number) >>> 0, (b[q + 1] as number) >>> 0, this.#salt) & mask;
      const movable = i <= j ? home <= i || home > j : home <= i && home > j;
      if (movable) {
        const p = i * W;
        b[p] = b[q] as number;
        b[p + 1] = b[q + 1] as number;
        b[p + 2] = b[q + 2] as number;
        putTag(tags, i, mask + 1, tags[j] as number);
        i = j;
      }
    }
    b[i * W + 2] = EMPTY;
    putTag(tags, i, mask + 1, ABI.IDX_TAG_EMPTY);
  }

  #grow(): void {
    if (this.#old !== null) this.#migrate(Number.POSITIVE_INFINITY);
    const buckets = (this.#mask + 1) * 2;
    if (buckets > 2 ** 29) throw invalidArg('hash index cannot grow past 2^29 buckets');
    this.#old = this.#b;
    this.#oldMask = this.#mask;
    this.#migratePos = 0;
    this.#b = table(buckets, this.#advise);
    this.#tags = tagTable(buckets);
    this.#mask = buckets - 1;
    this.#generation++;
  }

  #migrate(steps: number): void {
    const old = this.#old as Int32Array;
    const b = this.#b;
    const tags = this.#tags;
    const mask = this.#mask;
    const end = old.length / W;
    let n = 0;
    while (this.#migratePos < end && n < steps) {
      const o = this.#migratePos++ * W;
      n++;
      const v = old[o + 2] as number;
      if (v < 0) continue;
      const l = old[o] as number;
      const h = old[o + 1] as number;
      const hash = hash64(l >>> 0, h >>> 0, this.#salt);
      let i = hash & mask;
      while (b[i * W + 2] !== EMPTY) i = (i + 1) & mask;
      const p = i * W;
      b[p] = l;
      b[p + 1] = h;
      b[p + 2] = v;
      putTag(tags, i, mask + 1, tagOf(hash));
      old[o + 2] = GONE;
    }
    if (this.#migratePos >= end) {
      this.#old = null;
      this.#generation++;
    }
  }
}

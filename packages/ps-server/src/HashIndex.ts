import { invalidArg } from './errors.js';
import { hash64 } from './internal/mix.js';

const EMPTY = -1;
/** A bucket of the old table whose entry moved or was deleted; probes pass over it. */
const GONE = -2;
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
}

function pow2AtLeast(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/**
 * u64 key → non-negative int32 value, open addressing with linear probing over typed arrays
 * (lo/hi key halves and the value: 12 bytes per bucket). Growth is incremental: a doubled
 * table is allocated and the old buckets move a few per insert, so no call pays for a whole
 * rehash. While moving, lookups try the new table, then the old one.
 */
export class HashIndex {
  #lo: Uint32Array;
  #hi: Uint32Array;
  #val: Int32Array;
  #mask: number;
  #oldLo: Uint32Array | null = null;
  #oldHi: Uint32Array | null = null;
  #oldVal: Int32Array | null = null;
  #oldMask = 0;
  #migratePos = 0;
  #size = 0;
  readonly #maxLoad: number;
  readonly #fixed: boolean;
  readonly #salt: number;

  constructor(options: HashIndexOptions = {}) {
    const buckets = pow2AtLeast(Math.max(2, options.initialBuckets ?? 16));
    const maxLoad = options.maxLoad ?? 0.7;
    if (!(maxLoad > 0 && maxLoad < 1)) throw invalidArg('maxLoad must be in (0, 1)');
    if (buckets > 2 ** 30) throw invalidArg('too many buckets');
    this.#maxLoad = maxLoad;
    this.#fixed = options.fixed ?? false;
    this.#salt = (options.salt ?? Math.floor(Math.random() * 2 ** 32)) >>> 0;
    this.#lo = new Uint32Array(buckets);
    this.#hi = new Uint32Array(buckets);
    this.#val = new Int32Array(buckets).fill(EMPTY);
    this.#mask = buckets - 1;
  }

  /** Buckets needed to hold `entries` without growing at this load factor. */
  static bucketsFor(entries: number, maxLoad = 0.7): number {
    return pow2AtLeast(Math.max(2, Math.floor(entries / maxLoad) + 1));
  }

  /** Bytes of the typed arrays held now (both tables while growing). */
  static bytesFor(buckets: number): number {
    return buckets * 12;
  }

  get size(): number {
    return this.#size;
  }

  get buckets(): number {
    return this.#mask + 1;
  }

  get growing(): boolean {
    return this.#oldVal !== null;
  }

  get bytes(): number {
    return this.#val.length * 12 + (this.#oldVal === null ? 0 : this.#oldVal.length * 12);
  }

  /** The value of key (lo, hi), or -1. */
  get(lo: number, hi: number): number {
    const mask = this.#mask;
    const klo = this.#lo;
    const khi = this.#hi;
    const val = this.#val;
    let i = hash64(lo, hi, this.#salt) & mask;
    for (;;) {
      const v = val[i] as number;
      if (v === EMPTY) break;
      if (klo[i] === lo && khi[i] === hi) return v;
      i = (i + 1) & mask;
    }
    return this.#oldVal === null ? EMPTY : this.#getOld(lo, hi);
  }

  #findOld(lo: number, hi: number): number {
    const val = this.#oldVal as Int32Array;
    const klo = this.#oldLo as Uint32Array;
    const khi = this.#oldHi as Uint32Array;
    const mask = this.#oldMask;
    let i = hash64(lo, hi, this.#salt) & mask;
    for (;;) {
      const v = val[i] as number;
      if (v === EMPTY) return -1;
      if (v !== GONE && klo[i] === lo && khi[i] === hi) return i;
      i = (i + 1) & mask;
    }
  }

  #getOld(lo: number, hi: number): number {
    const b = this.#findOld(lo, hi);
    return b < 0 ? EMPTY : ((this.#oldVal as Int32Array)[b] as number);
  }

  /** Sets key (lo, hi) to `value` (≥ 0), inserting it if absent. */
  set(lo: number, hi: number, value: number): void {
    const mask = this.#mask;
    let i = hash64(lo, hi, this.#salt) & mask;
    for (;;) {
      const v = this.#val[i] as number;
      if (v === EMPTY) break;
      if (this.#lo[i] === lo && this.#hi[i] === hi) {
        this.#val[i] = value;
        return;
      }
      i = (i + 1) & mask;
    }
    if (this.#oldVal !== null) {
      const b = this.#findOld(lo, hi);
      if (b >= 0) {
        this.#oldVal[b] = GONE;
        this.#size--;
      }
    }
    if (this.#size + 1 > this.#maxLoad * (this.#mask + 1)) {
      if (this.#fixed) throw invalidArg('fixed-size index is full');
      this.#grow();
      this.set(lo, hi, value);
      return;
    }
    this.#lo[i] = lo;
    this.#hi[i] = hi;
    this.#val[i] = value;
    this.#size++;
    if (this.#oldVal !== null) this.#migrate(MIGRATE_STEP);
  }

  /** Removes key (lo, hi); returns whether it was there. */
  delete(lo: number, hi: number): boolean {
    const mask = this.#mask;
    let i = hash64(lo, hi, this.#salt) & mask;
    for (;;) {
      const v = this.#val[i] as number;
      if (v === EMPTY) break;
      if (this.#lo[i] === lo && this.#hi[i] === hi) {
        this.#backShift(i);
        this.#size--;
        return true;
      }
      i = (i + 1) & mask;
    }
    if (this.#oldVal !== null) {
      const b = this.#findOld(lo, hi);
      if (b >= 0) {
        // A tombstone, not a shift: shifting could move an entry behind the migration cursor.
        this.#oldVal[b] = GONE;
        this.#size--;
        return true;
      }
    }
    return false;
  }

  /** Calls fn(lo, hi, value) for every entry (order unspecified). */
  forEach(fn: (lo: number, hi: number, value: number) => void): void {
    for (let i = 0; i <= this.#mask; i++) {
      const v = this.#val[i] as number;
      if (v >= 0) fn(this.#lo[i] as number, this.#hi[i] as number, v);
    }
    const ov = this.#oldVal;
    if (ov !== null) {
      for (let i = 0; i < ov.length; i++) {
        const v = ov[i] as number;
        if (v >= 0) fn((this.#oldLo as Uint32Array)[i] as number, (this.#oldHi as Uint32Array)[i] as number, v);
      }
    }
  }

  // Backward-shift deletion keeps linear-probe chains intact without tombstones.
  #backShift(hole: number): void {
    const mask = this.#mask;
    let i = hole;
    let j = hole;
    for (;;) {
      j = (j + 1) & mask;
      if (this.#val[j] === EMPTY) break;
      const home = hash64(this.#lo[j] as number, this.#hi[j] as number, this.#salt) & mask;
      const movable = i <= j ? home <= i || home > j : home <= i && home > j;
      if (movable) {
        this.#lo[i] = this.#lo[j] as number;
        this.#hi[i] = this.#hi[j] as number;
        this.#val[i] = this.#val[j] as number;
        i = j;
      }
    }
    this.#val[i] = EMPTY;
  }

  #grow(): void {
    if (this.#oldVal !== null) this.#migrate(Number.POSITIVE_INFINITY);
    const buckets = (this.#mask + 1) * 2;
    if (buckets > 2 ** 30) throw invalidArg('hash index cannot grow past 2^30 buckets');
    this.#oldLo = this.#lo;
    this.#oldHi = this.#hi;
    this.#oldVal = this.#val;
    this.#oldMask = this.#mask;
    this.#migratePos = 0;
    this.#lo = new Uint32Array(buckets);
    this.#hi = new Uint32Array(buckets);
    this.#val = new Int32Array(buckets).fill(EMPTY);
    this.#mask = buckets - 1;
  }

  #migrate(steps: number): void {
    const ov = this.#oldVal as Int32Array;
    const olo = this.#oldLo as Uint32Array;
    const ohi = this.#oldHi as Uint32Array;
    const mask = this.#mask;
    let n = 0;
    while (this.#migratePos < ov.length && n < steps) {
      const b = this.#migratePos++;
      n++;
      const v = ov[b] as number;
      if (v < 0) continue;
      const lo = olo[b] as number;
      const hi = ohi[b] as number;
      let i = hash64(lo, hi, this.#salt) & mask;
      while (this.#val[i] !== EMPTY) i = (i + 1) & mask;
      this.#lo[i] = lo;
      this.#hi[i] = hi;
      this.#val[i] = v;
      ov[b] = GONE;
    }
    if (this.#migratePos >= ov.length) {
      this.#oldLo = null;
      this.#oldHi = null;
      this.#oldVal = null;
    }
  }
}

import { PsWireError } from './errors.js';
import { HALF_TO_FLOAT } from './Fp16.js';
import { hash64 } from './Hash.js';
import type { InitFn } from './KeyInit.js';
import {
  STORE_VIEW,
  STORE_VIEW_HEADER,
  STORE_VIEW_META,
  type StoreViewLayout,
  storeViewRowOffset,
} from './StoreView.js';
import type { StoreViewSlotCache } from './StoreViewSlotCache.js';

/** Per-key outcome of a one-sided read (StoreViewReader.status). */
export const ViewKeyStatus = Object.freeze({
  /** Not resolved yet (planned for the next round). */
  PENDING: 0,
  /** out holds the key's row (read, or its KeyInit row: the key has none). */
  DONE: 1,
  /** Read raced a write (or the bytes made no sense): read again. */
  RETRY: 2,
  /** Give up reading one-sidedly: pull it two-sided (attempts spent on races or on a probe
   * chain longer than the windows they read). */
  FALLBACK: 3,
});

// Internal states between the rounds.
const FOUND = 4;
const ABSENT = 5;
/** Neither the key nor an empty bucket in its window: the next window, next attempt. */
const CONTINUE = 6;
/** A slot hint from the cache: meta, row, meta read in round 1, no index window. */
const CACHED = 7;

/**
 * READs to execute: op i copies `length[i]` bytes at region offset `remote[i]` to
 * `local[i]` of the reader's scratch (`into[i]` 0) or of the caller's `out` bytes (`into[i]`
 * 1: f32 rows land in place, no copy). Ops of one list must be executed in list order (one
 * RC QP: muxread's `conn.read`); the seqlock relies on it. Valid until the next plan call.
 */
export interface ViewReadList {
  count: number;
  readonly remote: Float64Array;
  readonly length: Uint32Array;
  readonly local: Float64Array;
  readonly into: Uint8Array;
}

/** Executes a list (see ViewReadList); may be synchronous. */
export type ViewReadFn = (
  list: ViewReadList,
  scratch: Uint8Array,
  out: Uint8Array,
) => void | Promise<void>;

/**
 * A ViewReadFn over a region in this process's memory (a colocated shard's, a test's): each
 * op a byte copy, in list order; a range outside the region or the destination is
 * ERR_PS_WIRE_INVALID_ARG (a reader never plans one from a decoded header).
 */
export function localViewRead(region: Uint8Array): ViewReadFn {
  return (list, scratch, out) => {
    for (let i = 0; i < list.count; i++) {
      const r = list.remote[i] as number;
      const len = list.length[i] as number;
      const l = list.local[i] as number;
      const dst = list.into[i] === 0 ? scratch : out;
      if (!(r >= 0 && r + len <= region.byteLength && l >= 0 && l + len <= dst.byteLength))
        throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', `READ ${r} + ${len} → ${l} out of range`);
      dst.set(region.subarray(r, r + len), l);
    }
  };
}

export interface StoreViewReaderOptions {
  /** Most keys of one batch. */
  maxKeys: number;
  /** KeyInit of the table (rows of keys the store has no row for). */
  init: InitFn;
  /** Index buckets read per key from its home bucket. Default 8. */
  windowBuckets?: number;
  /** Scratch memory (registered, for a NIC); default a fresh buffer of `scratchBytes`. */
  scratch?: Uint8Array;
  /**
   * Key → slot hints (may be shared by the readers of one table): a hinted key is read as
   * meta, row, meta in round 1, skipping its index window; a hint that does not hold sends
   * the key through the index. Hints are learned from rows accepted through the index.
   */
  slotCache?: StoreViewSlotCache;
}

const H = STORE_VIEW_HEADER;
const B = STORE_VIEW.BUCKET_BYTES;
const M = STORE_VIEW.META_BYTES;
// The (generation, index seq) words, read before and after the index windows.
const EPOCH_BYTES = 8;

/**
 * The reader of a store view: pure logic over bytes an untrusted shard served, no transport.
 * Round 1 reads each key's index window (bracketed by the header's generation and index seq),
 * round 2 each found key's meta, row, meta; `finish` accepts a row only when both metas carry
 * the same even seq, the key, and the live mark, fills absent keys with KeyInit, and marks the
 * rest RETRY. With a slot cache, keys it hints are read as meta, row, meta in round 1 (no
 * window; README "Slot hints"). Preallocated for `maxKeys`: nothing is allocated per batch.
 */
export class StoreViewReader {
  readonly layout: StoreViewLayout;
  /** ViewKeyStatus per key of the current batch. */
  readonly status: Uint8Array;
  readonly scratch: Uint8Array;
  readonly #init: InitFn;
  readonly #w: number;
  readonly #max: number;
  readonly #list: ViewReadList;
  readonly #s32: Uint32Array;
  readonly #s16: Uint16Array;
  readonly #slot: Int32Array;
  /** Per key: buckets past home where its next window starts (a chain read over attempts). */
  readonly #probe: Int32Array;
  /** Per key: the (generation, index seq) its chain's first window was read under. */
  readonly #chain: Uint32Array;
  readonly #k32: Uint32Array;
  readonly #metaAt: number;
  readonly #rowsAt: number;
  readonly #cache: StoreViewSlotCache | undefined;
  /** f32 rows (READ straight into out); else f16, READ into scratch and widened. */
  readonly #f32: boolean;
  /** The cache's generation when this batch took its hints. */
  #hintGen = 0;
  #hinted = 0;
  #n = 0;
  #out: Float32Array | null = null;
  #outBytes: Uint8Array = new Uint8Array(0);

  constructor(layout: StoreViewLayout, options: StoreViewReaderOptions) {
    const max = options.maxKeys;
    if (!Number.isInteger(max) || max < 1 || max > 1 << 20)
      throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'maxKeys must be in [1, 2^20]');
    const w = Math.min(options.windowBuckets ?? 8, layout.buckets);
    if (!Number.isInteger(w) || w < 1 || w > 256)
      throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'windowBuckets must be in [1, 256]');
    this.layout = layout;
    this.#init = options.init;
    this.#cache = options.slotCache;
    this.#w = w;
    this.#max = max;
    this.#f32 = layout.rowDtype === 'f32';
    this.#metaAt = 2 * EPOCH_BYTES + max * w * B;
    this.#rowsAt = this.#metaAt + max * 2 * M;
    const bytes = StoreViewReader.scratchBytes(layout, max, w);
    const scratch = options.scratch ?? new Uint8Array(bytes);
    if (scratch.byteLength < bytes || scratch.byteOffset % 4 !== 0)
      throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', `scratch must be ${bytes} bytes, 4-aligned`);
    this.scratch = scratch;
    this.#s32 = new Uint32Array(scratch.buffer, scratch.byteOffset, Math.floor(bytes / 4));
    this.#s16 = new Uint16Array(scratch.buffer, scratch.byteOffset, Math.floor(bytes / 2));
    this.status = new Uint8Array(max);
    this.#slot = new Int32Array(max);
    this.#probe = new Int32Array(max);
    this.#chain = new Uint32Array(2 * max);
    this.#k32 = new Uint32Array(2 * max);
    const ops = 2 + 3 * max;
    this.#list = {
      count: 0,
      remote: new Float64Array(ops),
      length: new Uint32Array(ops),
      local: new Float64Array(ops),
      into: new Uint8Array(ops),
    };
  }

  /** Scratch bytes a reader of this layout needs. */
  static scratchBytes(layout: StoreViewLayout, maxKeys: number, windowBuckets = 8): number {
    const w = Math.min(windowBuckets, layout.buckets);
    const rows = layout.rowDtype === 'f16' ? maxKeys * layout.rowBytes : 0;
    return 2 * EPOCH_BYTES + maxKeys * (w * B + 2 * M) + rows;
  }

  /**
   * Starts a batch of n keys (lo/hi u32 pairs in k32): every key PENDING, or hinted by the
   * slot cache. Returns the hinted keys.
   */
  begin(k32: Uint32Array, n: number): number {
    if (!Number.isInteger(n) || n < 0 || n > this.#max || k32.length < 2 * n)
      throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', `a batch of 0 … ${this.#max} keys`);
    this.#n = n;
    const own = this.#k32;
    for (let i = 0; i < 2 * n; i++) own[i] = k32[i] as number;
    this.status.fill(ViewKeyStatus.PENDING, 0, n);
    this.#probe.fill(0, 0, n);
    this.#hinted = 0;
    const cache = this.#cache;
    if (cache === undefined) return 0;
    this.#hintGen = cache.generation;
    const slots = this.layout.slotCount;
    let hinted = 0;
    for (let i = 0; i < n; i++) {
      const slot = cache.lookup(own[2 * i] as number, own[2 * i + 1] as number);
      if (slot < 0 || slot >= slots) continue;
      this.#slot[i] = slot;
      this.status[i] = CACHED;
      hinted++;
    }
    return hinted;
  }

  #op(remote: number, length: number, local: number, into: number): void {
    const l = this.#list;
    const i = l.count++;
    l.remote[i] = remote;
    l.length[i] = length;
    l.local[i] = local;
    l.into[i] = into;
  }

  /** Round 1: the index windows of the PENDING keys (count 0: nothing is pending). */
  planIndex(): ViewReadList {
    const l = this.layout;
    const w = this.#w;
    const mask = l.buckets - 1;
    const k32 = this.#k32;
    this.#list.count = 0;
    let any = false;
    for (let i = 0; i < this.#n; i++) {
      const st = this.status[i];
      if (st !== ViewKeyStatus.PENDING && st !== CACHED) continue;
      if (!any) this.#op(H.GENERATION, EPOCH_BYTES, 0, 0);
      any = true;
      // Inside the generation bracket: a load between the two epoch reads shows.
      if (st === CACHED) {
        this.#planRow(i, this.#slot[i] as number);
        continue;
      }
      const home =
        ((hash64(k32[2 * i] as number, k32[2 * i + 1] as number, l.salt) & mask) +
          (this.#probe[i] as number)) &
        mask;
      const local = 2 * EPOCH_BYTES + i * w * B;
      // A window past the last bucket wraps: two READs landing back to back.
      const first = Math.min(w, l.buckets - home);
      this.#op(l.indexOffset + home * B, first * B, local, 0);
      if (first < w) this.#op(l.indexOffset, (w - first) * B, local + first * B, 0);
    }
    if (any) this.#op(H.GENERATION, EPOCH_BYTES, EPOCH_BYTES, 0);
    return this.#list;
  }

  /** Round 2, from round 1's bytes: meta, row, meta of every key found in its window. */
  planRows(): ViewReadList {
    const l = this.layout;
    const s = this.#s32;
    const w = this.#w;
    const k32 = this.#k32;
    // Absent is trusted only if no bucket moved meanwhile: same generation, same even seq
    // (and, for a chain read over several attempts, the same as when its first window was).
    const gen = s[0] as number;
    const seq = s[1] as number;
    const stable = gen === s[2] && seq === s[3] && (seq & 1) === 0;
    this.#list.count = 0;
    for (let i = 0; i < this.#n; i++) {
      if (this.status[i] !== ViewKeyStatus.PENDING) continue;
      const lo = k32[2 * i] as number;
      const hi = k32[2 * i + 1] as number;
      let p = (2 * EPOCH_BYTES + i * w * B) >>> 2;
      let outcome: number = CONTINUE;
      for (let b = 0; b < w; b++, p += 3) {
        const v = (s[p + 2] as number) | 0;
        if (v === STORE_VIEW.BUCKET_EMPTY) {
          outcome = stable ? ABSENT : ViewKeyStatus.RETRY;
          break;
        }
        if (v < 0 || s[p] !== lo || s[p + 1] !== hi) continue;
        // A slot beyond the table: a torn or forged bucket, never read.
        if (v >= l.slotCount) outcome = ViewKeyStatus.RETRY;
        else {
          outcome = FOUND;
          this.#slot[i] = v;
        }
        break;
      }
      const probe = this.#probe[i] as number;
      if (outcome === CONTINUE || (outcome === ABSENT && probe > 0)) {
        const first = probe === 0;
        if (first && stable) {
          this.#chain[2 * i] = gen;
          this.#chain[2 * i + 1] = seq;
        }
        const sameChain = stable && this.#chain[2 * i] === gen && this.#chain[2 * i + 1] === seq;
        if (!sameChain) outcome = ViewKeyStatus.RETRY;
        else if (outcome === CONTINUE) {
          this.#probe[i] = probe + w;
          // The whole index read without the key or an empty bucket: a full (forged) index.
          if (probe + w >= l.buckets) outcome = ViewKeyStatus.FALLBACK;
        }
      }
      if (outcome === ViewKeyStatus.RETRY) this.#probe[i] = 0;
      this.status[i] = outcome;
      if (outcome === FOUND) this.#planRow(i, this.#slot[i] as number);
    }
    return this.#list;
  }

  /** Meta, row, meta of key i at slot (f32 rows straight into out). */
  #planRow(i: number, slot: number): void {
    const l = this.layout;
    const meta = l.metaOffset + slot * M;
    const mAt = this.#metaAt + i * 2 * M;
    const rowBytes = l.rowBytes;
    const row = storeViewRowOffset(l, slot);
    this.#op(meta, M, mAt, 0);
    if (this.#f32) this.#op(row, rowBytes, i * rowBytes, 1);
    else this.#op(row, rowBytes, this.#rowsAt + i * rowBytes, 0);
    this.#op(meta, M, mAt + M, 0);
  }

  /**
   * Completes the round: rows of found keys whose two metas agree (even seq, the key, live)
   * are DONE (f16 widened into out), absent keys get their KeyInit row; the rest RETRY.
   * A hinted key is DONE under the same rule and only if the generation stayed the hint's
   * across the round; else its hint is dropped and it is RETRY (through the index next).
   * Returns the keys to read again (RETRY, or a chain continuing in its next window).
   */
  finish(out: Float32Array): number {
    const l = this.layout;
    const dim = l.dim;
    if (out.length < this.#n * dim)
      throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'out is shorter than the batch');
    const s = this.#s32;
    const k32 = this.#k32;
    const cache = this.#cache;
    // Round 1's generation words (before, after): hints and learning need them equal.
    const gen = s[0] as number;
    const genStable = gen === s[2];
    if (cache !== undefined && genStable) cache.observe(gen);
    const hintsHold = genStable && gen === this.#hintGen;
    let retry = 0;
    for (let i = 0; i < this.#n; i++) {
      const st = this.status[i];
      const lo = k32[2 * i] as number;
      const hi = k32[2 * i + 1] as number;
      if (st === ABSENT) {
        this.#init(out, i * dim, dim, lo, hi);
        this.status[i] = ViewKeyStatus.DONE;
        continue;
      }
      if (st === ViewKeyStatus.RETRY || st === CONTINUE) retry++;
      if (st !== FOUND && st !== CACHED) continue;
      const slot = this.#slot[i] as number;
      if (!(this.#rowOk(i, lo, hi) && (st === FOUND || hintsHold))) {
        if (st === CACHED && cache !== undefined) {
          cache.forget(lo, hi, slot);
          cache.stale++;
        }
        this.status[i] = ViewKeyStatus.RETRY;
        this.#probe[i] = 0;
        retry++;
        continue;
      }
      if (cache !== undefined) {
        if (st === CACHED) {
          cache.hits++;
          this.#hinted++;
        } else if (genStable) cache.remember(lo, hi, slot, gen);
      }
      if (l.rowDtype === 'f16') {
        const h = (this.#rowsAt + i * l.rowBytes) >>> 1;
        const u16 = this.#s16;
        for (let j = 0, o = i * dim; j < dim; j++)
          out[o + j] = HALF_TO_FLOAT[u16[h + j] as number] as number;
      }
      this.status[i] = ViewKeyStatus.DONE;
    }
    return retry;
  }

  /** Key i's two metas agree: the same even seq, the key, live. */
  #rowOk(i: number, lo: number, hi: number): boolean {
    const s = this.#s32;
    const a = (this.#metaAt + i * 2 * M) >>> 2;
    const b = a + (M >>> 2);
    const seq = s[a + STORE_VIEW_META.SEQ] as number;
    return (
      (seq & 1) === 0 &&
      s[b + STORE_VIEW_META.SEQ] === seq &&
      s[a + STORE_VIEW_META.KEY_LO] === lo &&
      s[a + STORE_VIEW_META.KEY_HI] === hi &&
      s[a + STORE_VIEW_META.LIVE] === 1 &&
      s[b + STORE_VIEW_META.KEY_LO] === lo &&
      s[b + STORE_VIEW_META.KEY_HI] === hi &&
      s[b + STORE_VIEW_META.LIVE] === 1
    );
  }

  /** The bytes of out, as `into` 1 READs address them (cached: a reused out costs nothing). */
  outBytes(out: Float32Array): Uint8Array {
    if (out !== this.#out) {
      this.#out = out;
      this.#outBytes = new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
    }
    return this.#outBytes;
  }

  /**
   * RETRY keys (and keys whose chain continues in the next window) become PENDING for another
   * attempt or, with `last`, FALLBACK.
   */
  rearm(last: boolean): void {
    const next = last ? ViewKeyStatus.FALLBACK : ViewKeyStatus.PENDING;
    for (let i = 0; i < this.#n; i++) {
      const st = this.status[i];
      if (st === ViewKeyStatus.RETRY || st === CONTINUE) this.status[i] = next;
    }
  }

  /** Keys of the batch whose rows were accepted through a slot hint. */
  get hinted(): number {
    return this.#hinted;
  }

  /** Keys of the batch with this status. */
  count(status: number): number {
    let c = 0;
    for (let i = 0; i < this.#n; i++) if (this.status[i] === status) c++;
    return c;
  }
}

/**
 * Reads the rows of n keys into out[i·dim …] one-sidedly through `read`, re-reading raced
 * keys up to `attempts` times in all (plus one round when the reader's slot cache hinted
 * keys: a hint that does not hold costs a round, not an attempt). Returns the keys left
 * FALLBACK (reader.status names them): the caller pulls those two-sided. Every loop is
 * bounded by `attempts` + 1.
 */
export async function readStoreView(
  reader: StoreViewReader,
  k32: Uint32Array,
  n: number,
  out: Float32Array,
  read: ViewReadFn,
  attempts = 4,
): Promise<number> {
  if (!Number.isInteger(attempts) || attempts < 1 || attempts > 64)
    throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'attempts must be in [1, 64]');
  if (out.length < n * reader.layout.dim)
    throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'out is shorter than the batch');
  // A hint that does not hold costs its key a round, not one of its attempts.
  const rounds = attempts + (reader.begin(k32, n) > 0 ? 1 : 0);
  const outBytes = reader.outBytes(out);
  for (let a = 0; a < rounds; a++) {
    const r1 = reader.planIndex();
    if (r1.count === 0) break;
    await read(r1, reader.scratch, outBytes);
    const r2 = reader.planRows();
    if (r2.count > 0) await read(r2, reader.scratch, outBytes);
    const retry = reader.finish(out);
    reader.rearm(a === rounds - 1);
    if (retry === 0) break;
  }
  return reader.count(ViewKeyStatus.FALLBACK);
}

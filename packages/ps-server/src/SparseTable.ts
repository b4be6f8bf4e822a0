// Over 500 lines on purpose: one sparse table (index, rows, optimizer state, budget,
// admission and eviction) whose invariants span all of them.
import { CountMinSketch } from './CountMinSketch.js';
import { invalidArg, PsError } from './errors.js';
import { HashIndex } from './HashIndex.js';
import { ABI } from './internal/abi.js';
import { HALF_TO_FLOAT, toHalf } from './internal/fp16.js';
import { kernelsChoice, loadKernels, type NativeTableKernels } from './internal/native.js';
import { F16_MAX, F32_MAX, saturate } from './internal/saturate.js';
import { createInit, type InitConfig, type InitFn } from './KeyInit.js';
import {
  createOptimizer,
  type Optimizer,
  type OptimizerConfig,
  type OverflowPolicy,
  overflowPolicy,
} from './Optimizer.js';
import type { RowBlock, RowMemory } from './RowMemory.js';
import { StoreViewWriter } from './StoreViewWriter.js';

export interface AdmissionConfig {
  /** A new key gets a row on the push that brings its estimated count to this. ≥ 1. */
  threshold: number;
  /** Counters per sketch row (power of two). Default 65 536. */
  width?: number;
  /** Sketch rows (hash functions). Default 4. */
  depth?: number;
}

export interface SparseTableConfig {
  name: string;
  /** Floats per row, 1 … 4096. */
  dim: number;
  optimizer: OptimizerConfig;
  /** Value of rows of unseen keys. Default zeros. */
  init?: InitConfig;
  /** Row storage: 'f32' (default) or 'f16' (optimizer state stays float32). */
  rowDtype?: 'f32' | 'f16';
  /** Bytes the table may ever hold (rows, state, index, sketch). Default: unbounded. */
  budgetBytes?: number;
  /**
   * Without `budgetBytes`: rows the table holds at most (1 … 2^31 − 1); a new key beyond is
   * dropped (counted in the push's `dropped`; with `ttlMs` it takes the least recently used
   * row instead). Not in snapshots: keep it when a store is restored. Default 2^31 − 1
   * (memory is then the only bound).
   */
  maxRows?: number;
  /** Frequency filter for new keys. Default: every pushed key is admitted. */
  admission?: AdmissionConfig;
  /** Rows not pushed for this long are evicted (injected clock). Default: never. */
  ttlMs?: number;
  /** Append this table's pushes to the push log (when the store has one). Default true. */
  log?: boolean;
  /**
   * Batch kernels: 'native' (default; the C++ addon gathers and updates one batch per call,
   * throws ERR_PS_NATIVE_LOAD when the addon does not load) or 'js' (the reference
   * implementation). Both give bit-identical tables. `RDMAJS_PS_KERNELS=js` in the environment
   * puts every table on the JS kernels, whatever this says.
   */
  kernels?: 'native' | 'js';
  /** Non-finite update results: see OverflowPolicy. Default 'saturate'. */
  overflow?: OverflowPolicy;
  /**
   * Lay the table out for one-sided reads (@rdmajs/ps-wire "Store view"): the index, a meta
   * record per row slot and the rows in ONE region taken from the RowMemory up front, every
   * change to a slot under its seqlock. Needs a fixed size (`maxRows` or `budgetBytes`: the
   * index never grows or moves) and no `ttlMs`. Default false.
   *
   * The region is registered whole for peers to READ, so the RowMemory handing it out must
   * be dedicated to it (its own registration, e.g. mux's `allocReadRegion`), not an arena
   * shared with other tables or buffers: a peer could otherwise READ whatever else shares
   * that registration, and the region could outlive (or be freed under) its registration.
   */
  oneSidedRead?: boolean;
}

export interface SparseTableStats {
  name: string;
  dim: number;
  rowDtype: 'f32' | 'f16';
  rows: number;
  /** Row limit from the budget (Infinity when unbounded). */
  maxRows: number;
  budgetBytes: number;
  /** Bytes held now: chunks + spare + index + sketch (exact typed-array sizes). */
  bytes: number;
  chunkBytes: number;
  /**
   * Row memory taken from the table's RowMemory that holds no chunk's rows (yet): the unused
   * part of the newest slab and 8-byte alignment padding. Counted in `bytes` and the budget.
   */
  spareBytes: number;
  indexBytes: number;
  sketchBytes: number;
  /** Chunk bytes per row slot: row + optimizer state + per-row metadata. */
  slotBytes: number;
  /** row + optimizer state bytes of one row (the raw data). */
  rawRowBytes: number;
  admitted: number;
  rejected: number;
  evictedLru: number;
  evictedTtl: number;
}

interface Chunk {
  readonly f32: Float32Array | null;
  readonly f16: Uint16Array | null;
  readonly state: Float32Array;
  readonly keys: Uint32Array;
  readonly steps: Uint32Array | null;
  readonly live: Uint8Array;
  /** One-sided readable tables: the slots' meta records in the store view (seq, key, live). */
  readonly meta: Uint32Array | null;
  readonly prev: Int32Array | null;
  readonly next: Int32Array | null;
  readonly tick: Float64Array | null;
  readonly lastMs: Float64Array | null;
  liveCount: number;
  readonly bytes: number;
}

/** One chunk's live slots, compacted in slot order, as snapshot tensor bytes. */
export interface CapturedChunk {
  n: number;
  keys: Uint8Array;
  rows: Uint8Array;
  state: Uint8Array[];
  steps: Uint8Array | null;
  tick: Uint8Array | null;
  lastMs: Uint8Array | null;
}

/** A consistent view of a table taken in O(chunks) (copy-on-write afterwards). */
export interface TableCapture {
  readonly rows: number;
  readonly chunkCount: number;
  readonly sketch: Uint16Array | null;
  readonly tickCounter: number;
  take(c: number): CapturedChunk;
}

const NONE = -1;
const TARGET_CHUNK_BYTES = 512 << 10;
/**
 * Row memory is taken in slabs of several chunks, doubling with the table up to this size:
 * a large table's rows then lie in few big blocks, which huge pages can back (random gathers
 * over gigabytes of 4 KiB pages miss the TLB on nearly every row) and which the per-batch
 * row-memory check walks quickly. The unused tail of the newest slab is at most this.
 */
const MAX_SLAB_BYTES = 16 << 20;
const MAX_CHUNK_ROWS = 16384;

/** Bytes a chunk's rows take in a slab: each chunk starts ROW_ALIGN-aligned. */
function slabStride(rowBytes: number): number {
  return Math.ceil(Math.max(1, rowBytes) / ABI.ROW_ALIGN) * ABI.ROW_ALIGN;
}

/**
 * Extra bytes asked per slab so its rows can start ROW_ALIGN-aligned (blocks are 8-byte
 * aligned). Asked on both kernel paths, so native and JS tables account alike.
 */
const SLAB_ALIGN_PAD = ABI.ROW_ALIGN - 8;

/**
 * Chunks the next slab holds: as many as the table has (so slabs double), at most
 * MAX_SLAB_BYTES of rows, never more than `room` (a budgeted table's remaining chunks).
 */
function slabChunks(chunks: number, room: number, stride: number): number {
  return Math.max(1, Math.min(room, chunks, Math.floor(MAX_SLAB_BYTES / stride)));
}

/** Slabs that hold `chunks` chunks of rows taken as #addChunk takes them. */
function slabsFor(chunks: number, stride: number): number {
  let slabs = 0;
  for (let have = 0; have < chunks; slabs++) have += slabChunks(have, chunks - have, stride);
  return slabs;
}
export const MAX_DIM = 4096;
/** Most rows a table holds (slots are int32). */
export const MAX_ROWS = 2 ** 31 - 1;

function floorPow2(n: number): number {
  let p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/**
 * A sparse table: u64 key → row of `dim` floats plus optimizer state, in chunks of row slots
 * from injected row memory, indexed by an incrementally growing HashIndex. Recency (LRU, TTL)
 * counts pushes only, so pulls are pure reads and the table is a deterministic function of
 * its pushes — which is what makes log replay exact.
 */
export class SparseTable {
  readonly name: string;
  readonly dim: number;
  readonly rowDtype: 'f32' | 'f16';
  readonly config: Readonly<SparseTableConfig>;
  readonly optimizer: Optimizer;
  readonly logged: boolean;
  readonly #init: InitFn;
  /** Unseen keys start as zeros (the default init): a run of misses is one fill. */
  readonly #zeroInit: boolean;
  readonly #memory: RowMemory;
  readonly #index: HashIndex;
  readonly #sketch: CountMinSketch | null;
  readonly #threshold: number;
  readonly #ttl: number;
  readonly #lru: boolean;
  readonly #view: StoreViewWriter | null;
  readonly #stateDim: number;
  readonly #rowStoreBytes: number;
  readonly #slotBytes: number;
  readonly #chunkShift: number;
  readonly #chunkRows: number;
  readonly #maxRows: number;
  readonly #budget: number;
  readonly #chunks: Chunk[] = [];
  #nextSlot = 0;
  #freeHead = NONE;
  #head = NONE;
  #tail = NONE;
  #tick = 0;
  #chunkBytes = 0;
  // Row memory slabs (each block once, released once by close), the newest one's fill point,
  // and the bytes asked of the RowMemory for all of them.
  readonly #slabs: RowBlock[] = [];
  #slab: { bytes: Uint8Array; next: number } | null = null;
  #slabBytes = 0;
  readonly #adviseHuge: ((a: Uint8Array) => void) | null;
  readonly #bytesToAlign: ((a: Uint8Array) => number) | null;
  #stats = { admitted: 0, rejected: 0, evictedLru: 0, evictedTtl: 0 };
  // Push scratch: a per-batch open-addressing map slot → unique index, and summed grads.
  #mapSlot = new Int32Array(64);
  #mapIdx = new Int32Array(64);
  #uniq = new Int32Array(32);
  #src = new Int32Array(32);
  #slots = new Int32Array(64);
  #acc = new Float32Array(32);
  readonly #tmp: Float32Array;
  /** Saturating: a row's weights and state before its JS update (see internal/saturate.ts). */
  readonly #old: Float32Array | null;
  #cow: Uint8Array | null = null;
  #cowCopies: Map<number, CapturedChunk> | null = null;
  readonly #k: NativeTableKernels | null;
  /** The native kernels run pushes too (not only gathers). */
  readonly #kPush: boolean;
  #kGen = -1;
  // Per-key step scalars for kernels that take them from JS (Adam), reused across batches.
  #kScalars = new Float32Array(0);
  // The distinct buffers under the chunks' row storage (RowMemory's) and the bytes each must
  // keep: checked once per batch, so a buffer detached or shrunk under the table (its
  // allocator's protection domain closed, say) is a typed error, never a read of freed memory.
  readonly #rowBuffers: ArrayBufferLike[] = [];
  readonly #rowBufferEnds: number[] = [];
  readonly #rowBufferAt = new Map<ArrayBufferLike, number>();
  #closed = false;

  constructor(config: SparseTableConfig, memory: RowMemory) {
    if (config === null || typeof config !== 'object')
      throw invalidArg('table config must be an object');
    if (
      typeof config.name !== 'string' ||
      config.name.length === 0 ||
      config.name.length > 200 ||
      !/^[A-Za-z0-9_.-]+$/.test(config.name)
    )
      throw invalidArg('table name must be 1–200 characters of [A-Za-z0-9_.-]');
    if (!Number.isInteger(config.dim) || config.dim < 1 || config.dim > MAX_DIM)
      throw invalidArg(`table ${config.name}: dim must be an integer in [1, ${MAX_DIM}]`);
    const dtype = config.rowDtype ?? 'f32';
    if (dtype !== 'f32' && dtype !== 'f16')
      throw invalidArg(`table ${config.name}: rowDtype must be 'f32' or 'f16'`);
    this.name = config.name;
    this.dim = config.dim;
    this.rowDtype = dtype;
    this.config = config;
    this.logged = config.log ?? true;
    this.optimizer = createOptimizer(config.optimizer);
    this.#init = createInit(config.init);
    const initKind = (config.init as { kind?: unknown } | null | undefined)?.kind;
    this.#zeroInit = initKind === undefined || initKind === 'zeros';
    this.#memory = memory;
    this.#tmp = new Float32Array(config.dim);
    const saturating = overflowPolicy(`table ${config.name}`, config.overflow) === 'saturate';
    const ttl = config.ttlMs ?? Number.POSITIVE_INFINITY;
    if (!(ttl > 0)) throw invalidArg(`table ${config.name}: ttlMs must be > 0`);
    this.#ttl = ttl;
    const budget = config.budgetBytes ?? Number.POSITIVE_INFINITY;
    if (!(budget > 0)) throw invalidArg(`table ${config.name}: budgetBytes must be > 0`);
    if (config.budgetBytes !== undefined && config.maxRows !== undefined)
      throw invalidArg(`table ${config.name}: maxRows is for tables without budgetBytes`);
    this.#budget = budget;
    this.#lru = Number.isFinite(budget) || Number.isFinite(ttl);
    const oneSided = config.oneSidedRead ?? false;
    if (typeof oneSided !== 'boolean')
      throw invalidArg(`table ${config.name}: oneSidedRead must be a boolean`);
    if (oneSided) StoreViewWriter.checkPlatform(config.name);
    if (oneSided && Number.isFinite(ttl))
      // A row past its TTL is KeyInit to a pull before any push sweeps it; a reader cannot see
      // the shard's clock, so it would return the stale row.
      throw invalidArg(`table ${config.name}: oneSidedRead tables cannot have ttlMs`);
    if (oneSided && !Number.isFinite(budget) && config.maxRows === undefined)
      throw invalidArg(`table ${config.name}: oneSidedRead needs maxRows or budgetBytes`);
    if (config.admission !== undefined) {
      const a = config.admission;
      if (!Number.isInteger(a.threshold) || a.threshold < 1 || a.threshold > 0xffff)
        throw invalidArg(
          `table ${config.name}: admission threshold must be an integer in [1, 65535]`,
        );
      this.#sketch = new CountMinSketch(a.width ?? 65536, a.depth ?? 4);
      this.#threshold = a.threshold;
    } else {
      this.#sketch = null;
      this.#threshold = 0;
    }
    this.#stateDim = this.optimizer.stateNames.length * config.dim;
    this.#old = saturating ? new Float32Array(config.dim + this.#stateDim) : null;
    this.#rowStoreBytes = config.dim * (dtype === 'f16' ? 2 : 4);
    // keys 8 + live 1 (+ steps 4) (+ prev/next 8 + tick 8) (+ lastMs 8)
    this.#slotBytes =
      this.#rowStoreBytes +
      this.#stateDim * 4 +
      9 +
      (this.optimizer.usesSteps ? 4 : 0) +
      (this.#lru ? 16 : 0) +
      (Number.isFinite(ttl) ? 8 : 0) +
      (oneSided ? StoreViewWriter.META_BYTES : 0);
    let chunkRows = Math.min(
      MAX_CHUNK_ROWS,
      floorPow2(Math.max(1, Math.floor(TARGET_CHUNK_BYTES / this.#slotBytes))),
    );
    if (config.kernels !== undefined && config.kernels !== 'native' && config.kernels !== 'js')
      throw invalidArg(`table ${config.name}: kernels must be 'native' or 'js'`);
    const kernels = kernelsChoice(config.kernels);
    const addon = kernels === 'native' ? loadKernels() : null;
    const advise = addon === null ? {} : { advise: (b: Int32Array) => addon.adviseHugePages(b) };
    this.#adviseHuge = addon === null ? null : (b) => addon.adviseHugePages(b);
    this.#bytesToAlign = addon === null ? null : (b) => addon.bytesToAlign(b);
    if (Number.isFinite(budget)) {
      const sketchBytes = this.#sketch?.bytes ?? 0;
      // A chunk's rows take their slab stride (8-byte aligned), the rest of a slot beside it.
      // Each slab also asks SLAB_ALIGN_PAD bytes more.
      const chunkCost = (cr: number) =>
        cr * (this.#slotBytes - this.#rowStoreBytes) + slabStride(cr * this.#rowStoreBytes);
      const fit = (rows: number, cr: number) => {
        const chunks = Math.ceil(rows / cr);
        const stride = slabStride(cr * this.#rowStoreBytes);
        return (
          sketchBytes +
            (oneSided ? StoreViewWriter.FIXED_BYTES : 0) +
            HashIndex.bytesFor(HashIndex.bucketsFor(rows)) +
            chunks * chunkCost(cr) +
            slabsFor(chunks, stride) * SLAB_ALIGN_PAD <=
          budget
        );
      };
      const guess = Math.floor((budget - sketchBytes) / (this.#slotBytes + 12));
      chunkRows = Math.min(chunkRows, floorPow2(Math.max(1, Math.floor(guess / 8))));
      let rows = Math.max(0, guess);
      while (rows > 0 && !fit(rows, chunkRows)) rows = Math.floor(rows * 0.97);
      if (rows < 1)
        throw invalidArg(
          `table ${config.name}: budgetBytes ${budget} cannot hold one row (${this.#slotBytes} B per row + index + sketch)`,
        );
      rows = Math.floor(rows / chunkRows) * chunkRows || rows;
      while (!fit(rows, chunkRows)) rows--;
      this.#maxRows = rows;
    } else {
      const cap = config.maxRows ?? MAX_ROWS;
      if (!Number.isInteger(cap) || cap < 1 || cap > MAX_ROWS)
        throw invalidArg(`table ${config.name}: maxRows must be an integer in [1, ${MAX_ROWS}]`);
      this.#maxRows = cap;
      // All of a readable table's slots exist from the start: no chunk much larger than it.
      if (oneSided) chunkRows = Math.min(chunkRows, floorPow2(cap));
    }
    this.#chunkRows = chunkRows;
    this.#chunkShift = Math.log2(chunkRows);
    if (oneSided) {
      this.#view = new StoreViewWriter(memory, {
        name: config.name,
        dim: config.dim,
        rowDtype: dtype,
        buckets: HashIndex.bucketsFor(this.#maxRows),
        slotCount: Math.ceil(this.#maxRows / chunkRows) * chunkRows,
        chunkRows,
      });
      this.#slabs.push(this.#view.block);
      this.#adviseHuge?.(this.#view.bytes);
      this.#slabBytes = this.#view.rowSectionBytes;
      this.#index = new HashIndex({
        initialBuckets: this.#view.layout.buckets,
        fixed: true,
        salt: this.#view.layout.salt,
        arrays: this.#view.indexArrays,
      });
    } else {
      this.#view = null;
      this.#index = Number.isFinite(budget)
        ? new HashIndex({
            initialBuckets: HashIndex.bucketsFor(this.#maxRows),
            fixed: true,
            ...advise,
          })
        : new HashIndex(advise);
    }
    if (addon !== null) {
      const nk = this.optimizer.native;
      this.#kPush = nk !== null;
      // A table whose optimizer has no native kernel still gathers natively.
      this.#k = new addon.TableKernels(
        this.dim,
        dtype === 'f16' ? ABI.ROW_F16 : ABI.ROW_F32,
        this.#stateDim,
        this.#chunkShift,
        this.optimizer.usesSteps,
        nk?.kind ?? ABI.OPT_SUM,
        Float64Array.from(nk?.params ?? []),
        this.#ttl,
        saturating,
      );
    } else {
      this.#k = null;
      this.#kPush = false;
    }
    // A readable table's layout is fixed: every chunk is carved from its region now.
    if (this.#view !== null)
      for (let c = this.#view.layout.slotCount / chunkRows; c > 0; c--) this.#addChunk();
  }

  /** The one-sided read region (its bytes and layout), or null when not `oneSidedRead`. */
  get storeView(): StoreViewWriter | null {
    return this.#view;
  }

  /** Which batch kernels this table runs. */
  get kernels(): 'native' | 'js' {
    return this.#k === null ? 'js' : 'native';
  }

  // Registers the index arrays with the native side again after a grow replaced them.
  #syncIndex(k: NativeTableKernels): void {
    const index = this.#index;
    if (index.generation === this.#kGen) return;
    const t = index.probeTables();
    k.setIndex(t.buckets, t.tags, t.old, t.salt);
    this.#kGen = index.generation;
  }

  // Once per batch, before any row is read or written (both kernel paths).
  #checkRowMemory(): void {
    if (this.#closed)
      throw new PsError('ERR_PS_CLOSED', `table ${this.name}: closed (its row memory is released)`);
    const bufs = this.#rowBuffers;
    for (let i = 0; i < bufs.length; i++)
      if ((bufs[i] as ArrayBufferLike).byteLength < (this.#rowBufferEnds[i] as number))
        throw new PsError(
          'ERR_PS_CLOSED',
          `table ${this.name}: its row memory was taken away (a buffer was detached or shrunk: was the allocator or protection domain closed before the store?)`,
        );
  }

  #kernelResult(r: number, what: string): number {
    if (r >= 0) return r;
    throw new PsError(
      'ERR_PS_INVALID_ARG',
      r === ABI.K_BAD_LENGTH
        ? `table ${this.name}: ${what}: an array is shorter than the batch`
        : `table ${this.name}: ${what}: the index names a slot beyond the table's chunks`,
    );
  }

  get rows(): number {
    return this.#index.size;
  }

  get maxRows(): number {
    return Number.isFinite(this.#budget) || this.#maxRows < MAX_ROWS
      ? this.#maxRows
      : Number.POSITIVE_INFINITY;
  }

  get bytes(): number {
    return this.#chunkBytes + this.#spareBytes + this.#index.bytes + (this.#sketch?.bytes ?? 0);
  }

  // Slab bytes not holding a chunk's rows.
  get #spareBytes(): number {
    return this.#slabBytes - this.#chunks.length * this.#chunkRows * this.#rowStoreBytes;
  }

  get stateDim(): number {
    return this.#stateDim;
  }

  get hasLru(): boolean {
    return this.#lru;
  }

  get hasTtl(): boolean {
    return Number.isFinite(this.#ttl);
  }

  get sketchShape(): { width: number; depth: number } | null {
    return this.#sketch === null ? null : { width: this.#sketch.width, depth: this.#sketch.depth };
  }

  stats(): SparseTableStats {
    return {
      name: this.name,
      dim: this.dim,
      rowDtype: this.rowDtype,
      rows: this.rows,
      maxRows: this.maxRows,
      budgetBytes: this.#budget,
      bytes: this.bytes,
      chunkBytes: this.#chunkBytes,
      spareBytes: this.#spareBytes,
      indexBytes: this.#index.bytes,
      sketchBytes: this.#sketch?.bytes ?? 0,
      slotBytes: this.#slotBytes,
      rawRowBytes: this.#rowStoreBytes + this.#stateDim * 4,
      ...this.#stats,
    };
  }

  /** Whether key (lo, hi) has a row now. */
  has(lo: number, hi: number, nowMs: number): boolean {
    const slot = this.#index.get(lo, hi);
    return slot >= 0 && !this.#expired(slot, nowMs);
  }

  /** Estimated push count of key (lo, hi) in the admission sketch (0 without one). */
  admissionEstimate(lo: number, hi: number): number {
    return this.#sketch?.estimate(lo, hi) ?? 0;
  }

  #expired(slot: number, nowMs: number): boolean {
    if (!Number.isFinite(this.#ttl)) return false;
    const c = this.#chunks[slot >>> this.#chunkShift] as Chunk;
    return (
      nowMs - ((c.lastMs as Float64Array)[slot & (this.#chunkRows - 1)] as number) >= this.#ttl
    );
  }

  /** Gathers rows of `n` keys (lo/hi pairs in k32) into out[i·dim …] in request order. */
  pullInto(k32: Uint32Array, n: number, out: Float32Array, nowMs: number): void {
    const dim = this.dim;
    if (!Number.isInteger(n) || n < 0 || k32.length < 2 * n || out.length < n * dim)
      throw invalidArg(
        `table ${this.name}: pull of ${n} keys needs ${n} keys and ${n} × ${dim} floats of out`,
      );
    this.#checkRowMemory();
    const shift = this.#chunkShift;
    const cmask = this.#chunkRows - 1;
    const index = this.#index;
    const ttl = Number.isFinite(this.#ttl);
    if (this.#slots.length < n) this.#slots = new Int32Array(n);
    const slots = this.#slots;
    const k = this.#k;
    if (k !== null) {
      this.#syncIndex(k);
      const misses = this.#kernelResult(k.gather(k32, n, out, slots, nowMs), 'gather');
      if (this.#zeroInit) {
        // The kernel wrote the misses' rows as zeros: their init rows already.
        index.advanceGrowth(n);
        return;
      }
      for (let q = 0; q < misses; q++) {
        const i = slots[q] as number;
        this.#init(out, i * dim, dim, k32[2 * i] as number, k32[2 * i + 1] as number);
      }
      index.advanceGrowth(n);
      return;
    }
    // Two passes: all index probes first, then all row copies, so independent cache misses
    // overlap instead of alternating.
    for (let i = 0; i < n; i++)
      slots[i] = index.get(k32[2 * i] as number, k32[2 * i + 1] as number);
    for (let i = 0, o = 0; i < n; i++, o += dim) {
      const slot = slots[i] as number;
      if (slot < 0 || (ttl && this.#expired(slot, nowMs))) {
        this.#init(out, o, dim, k32[2 * i] as number, k32[2 * i + 1] as number);
        continue;
      }
      const c = this.#chunks[slot >>> shift] as Chunk;
      const r = (slot & cmask) * dim;
      const f32 = c.f32;
      if (f32 !== null) {
        if (dim <= 64) for (let j = 0; j < dim; j++) out[o + j] = f32[r + j] as number;
        else out.set(f32.subarray(r, r + dim), o);
      } else {
        const h = c.f16 as Uint16Array;
        for (let j = 0; j < dim; j++) out[o + j] = HALF_TO_FLOAT[h[r + j] as number] as number;
      }
    }
    index.advanceGrowth(n);
  }

  /**
   * Applies the optimizer to the rows of `n` keys with grads[i·dim …]; duplicate keys are
   * summed first (in request order). Unadmitted keys are dropped. Returns rows updated and
   * keys dropped.
   */
  push(
    k32: Uint32Array,
    n: number,
    grads: Float32Array,
    nowMs: number,
  ): { rows: number; dropped: number } {
    // Checked once per batch, before anything is admitted or written.
    if (!Number.isInteger(n) || n < 0 || k32.length < 2 * n || grads.length < n * this.dim)
      throw invalidArg(
        `table ${this.name}: push of ${n} keys needs ${n} keys and ${n} × ${this.dim} grads`,
      );
    this.#checkRowMemory();
    const k = this.#k;
    // The native path covers what needs no per-key JS state during the update: no snapshot
    // copy-on-write running, no TTL clock. New keys are admitted here, in request order, as
    // the JS path does; in an LRU table a new key may evict a row this batch already looked
    // up, so those batches take the JS path.
    if (k === null || !this.#kPush || this.#cow !== null || Number.isFinite(this.#ttl))
      return this.#pushJs(k32, n, grads, nowMs);
    this.#syncIndex(k);
    this.#ensureScratch(n);
    if (this.#slots.length < n) this.#slots = new Int32Array(n);
    const slots = this.#slots;
    const misses = this.#kernelResult(k.lookup(k32, n, slots), 'lookup');
    let dropped = 0;
    if (misses > 0) {
      if (this.#lru) return this.#pushJs(k32, n, grads, nowMs);
      const mapSlot = this.#mapSlot;
      mapSlot.fill(NONE);
      const mmask = mapSlot.length - 1;
      for (let i = 0; i < n; i++) {
        if ((slots[i] as number) >= 0) continue;
        const lo = k32[2 * i] as number;
        const hi = k32[2 * i + 1] as number;
        // An earlier occurrence in this batch may have admitted the key already.
        let slot = this.#index.get(lo, hi);
        if (slot < 0) {
          if (this.#sketch !== null && this.#sketch.add(lo, hi) < this.#threshold) {
            this.#stats.rejected++;
            dropped++;
            continue;
          }
          slot = this.#newSlot(lo, hi, mapSlot, mmask);
          if (slot < 0) dropped++;
        }
        slots[i] = slot;
      }
      this.#syncIndex(k);
    }
    const uniq = this.#uniq;
    const u = this.#kernelResult(
      k.apply(slots, n, grads, uniq, this.#stepScalars(slots, n)),
      'push',
    );
    if (this.#lru) {
      // Same recency as the JS path: touched in first-occurrence order, ticks in that order.
      const shift = this.#chunkShift;
      const cmask = this.#chunkRows - 1;
      for (let q = 0; q < u; q++) {
        const slot = uniq[q] as number;
        this.#touch(slot);
        ((this.#chunks[slot >>> shift] as Chunk).tick as Float64Array)[slot & cmask] = ++this.#tick;
      }
    }
    return { rows: u, dropped };
  }

  // Adam's bias-correction scalars per key, from the row's step after this update: computed
  // here with the JS update's own function (V8's `**`), so both kernels use the same values.
  #stepScalars(slots: Int32Array, n: number): Float32Array | null {
    const fn = this.optimizer.native?.stepScalars;
    if (fn === undefined) return null;
    if (this.#kScalars.length < 2 * n) this.#kScalars = new Float32Array(2 * n);
    const sc = this.#kScalars;
    const shift = this.#chunkShift;
    const cmask = this.#chunkRows - 1;
    let last = -1;
    let lastAt = 0;
    for (let i = 0; i < n; i++) {
      const slot = slots[i] as number;
      if (slot < 0) continue;
      const steps = (this.#chunks[slot >>> shift] as Chunk).steps as Uint32Array;
      const step = (steps[slot & cmask] as number) + 1;
      if (step !== last) {
        fn(step, sc, 2 * i);
        last = step;
        lastAt = 2 * i;
      } else {
        sc[2 * i] = sc[lastAt] as number;
        sc[2 * i + 1] = sc[lastAt + 1] as number;
      }
    }
    return sc;
  }

  // The same per distinct row (uniq[q] at 2q), for update().
  #rowStepScalars(uniq: Int32Array, u: number): Float32Array | null {
    const fn = this.optimizer.native?.stepScalars;
    if (fn === undefined) return null;
    if (this.#kScalars.length < 2 * u) this.#kScalars = new Float32Array(2 * u);
    const sc = this.#kScalars;
    const shift = this.#chunkShift;
    const cmask = this.#chunkRows - 1;
    for (let q = 0; q < u; q++) {
      const slot = uniq[q] as number;
      const steps = (this.#chunks[slot >>> shift] as Chunk).steps as Uint32Array;
      fn((steps[slot & cmask] as number) + 1, sc, 2 * q);
    }
    return sc;
  }

  // The JS push: admission, eviction and LRU order in request order (the path for TTL and
  // budgeted tables' new keys and running snapshots), then the update — natively when the
  // table has native kernels, else the reference JS kernel.
  #pushJs(
    k32: Uint32Array,
    n: number,
    grads: Float32Array,
    nowMs: number,
  ): { rows: number; dropped: number } {
    const dim = this.dim;
    if (Number.isFinite(this.#ttl)) this.#sweepTtl(nowMs);
    this.#ensureScratch(n);
    const mapSlot = this.#mapSlot;
    const mapIdx = this.#mapIdx;
    const mmask = mapSlot.length - 1;
    mapSlot.fill(NONE);
    const uniq = this.#uniq;
    const src = this.#src;
    const acc = this.#acc;
    let u = 0;
    let dropped = 0;
    for (let i = 0; i < n; i++) {
      const lo = k32[2 * i] as number;
      const hi = k32[2 * i + 1] as number;
      let slot = this.#index.get(lo, hi);
      if (slot < 0) {
        if (this.#sketch !== null && this.#sketch.add(lo, hi) < this.#threshold) {
          this.#stats.rejected++;
          dropped++;
          continue;
        }
        slot = this.#newSlot(lo, hi, mapSlot, mmask);
        if (slot < 0) {
          dropped++;
          continue;
        }
      }
      let h = (Math.imul(slot, 0x9e3779b1) >>> 0) & mmask;
      while (mapSlot[h] !== NONE && mapSlot[h] !== slot) h = (h + 1) & mmask;
      const go = i * dim;
      if (mapSlot[h] === NONE) {
        // First occurrence: the update reads the caller's gradient in place.
        mapSlot[h] = slot;
        mapIdx[h] = u;
        uniq[u] = slot;
        src[u] = go;
        u++;
        if (this.#lru) this.#touch(slot);
      } else {
        const k = mapIdx[h] as number;
        const ao = k * dim;
        const first = src[k] as number;
        if (first >= 0) {
          for (let j = 0; j < dim; j++) acc[ao + j] = grads[first + j] as number;
          src[k] = -1;
        }
        for (let j = 0; j < dim; j++)
          acc[ao + j] = Math.fround((acc[ao + j] as number) + (grads[go + j] as number));
      }
    }
    const shift = this.#chunkShift;
    const cmask = this.#chunkRows - 1;
    const tick = this.#lru;
    const ttl = Number.isFinite(this.#ttl);
    const k = this.#k;
    if (k !== null && this.#kPush) {
      // JS did admission, eviction and LRU order above; the native kernel does the update.
      if (this.#cow !== null)
        for (let q = 0; q < u; q++) this.#beforeWrite((uniq[q] as number) >>> shift);
      this.#kernelResult(k.update(uniq, u, src, grads, acc, this.#rowStepScalars(uniq, u)), 'push');
      if (tick || ttl)
        for (let q = 0; q < u; q++) {
          const slot = uniq[q] as number;
          const c = this.#chunks[slot >>> shift] as Chunk;
          if (tick) (c.tick as Float64Array)[slot & cmask] = ++this.#tick;
          if (ttl) (c.lastMs as Float64Array)[slot & cmask] = nowMs;
        }
      return { rows: u, dropped };
    }
    const sd = this.#stateDim;
    const update = this.optimizer.update;
    const tmp = this.#tmp;
    const old = this.#old;
    for (let k = 0; k < u; k++) {
      const slot = uniq[k] as number;
      const ci = slot >>> shift;
      this.#beforeWrite(ci);
      const c = this.#chunks[ci] as Chunk;
      const i = slot & cmask;
      if (c.meta !== null) StoreViewWriter.begin(c.meta, i);
      let step = 0;
      if (c.steps !== null) {
        step = (c.steps[i] as number) + 1;
        c.steps[i] = step;
      }
      const s0 = src[k] as number;
      const g = s0 >= 0 ? grads : acc;
      const go = s0 >= 0 ? s0 : k * dim;
      if (c.f32 !== null) {
        if (old !== null) remember(old, c.f32, i * dim, dim, c.state, i * sd, sd);
        update(c.f32, i * dim, c.state, i * sd, g, go, dim, step);
        if (old !== null) {
          saturate(c.f32, i * dim, dim, old, 0, F32_MAX);
          saturate(c.state, i * sd, sd, old, dim, F32_MAX);
        }
      } else {
        const h = c.f16 as Uint16Array;
        const r = i * dim;
        for (let j = 0; j < dim; j++) tmp[j] = HALF_TO_FLOAT[h[r + j] as number] as number;
        if (old !== null) remember(old, tmp, 0, dim, c.state, i * sd, sd);
        update(tmp, 0, c.state, i * sd, g, go, dim, step);
        if (old !== null) {
          saturate(tmp, 0, dim, old, 0, F16_MAX);
          saturate(c.state, i * sd, sd, old, dim, F32_MAX);
        }
        for (let j = 0; j < dim; j++) h[r + j] = toHalf(tmp[j] as number);
      }
      if (c.meta !== null) StoreViewWriter.end(c.meta, i);
      if (tick) (c.tick as Float64Array)[i] = ++this.#tick;
      if (ttl) (c.lastMs as Float64Array)[i] = nowMs;
    }
    return { rows: u, dropped };
  }

  #ensureScratch(n: number): void {
    if (this.#mapSlot.length < 2 * n) {
      let m = this.#mapSlot.length;
      while (m < 2 * n) m *= 2;
      this.#mapSlot = new Int32Array(m);
      this.#mapIdx = new Int32Array(m);
    }
    if (this.#uniq.length < n) {
      this.#uniq = new Int32Array(n);
      this.#src = new Int32Array(n);
    }
    if (this.#acc.length < n * this.dim) this.#acc = new Float32Array(n * this.dim);
  }

  // A row for a new key: a free slot, a fresh one, or the LRU victim's (never one this batch
  // already uses). Returns -1 when the batch alone fills the table.
  #newSlot(lo: number, hi: number, mapSlot: Int32Array, mmask: number): number {
    let slot: number;
    if (this.#freeHead !== NONE) {
      slot = this.#freeHead;
      this.#freeHead = this.#nextOf(slot);
    } else if (this.#nextSlot < this.#maxRows) {
      slot = this.#nextSlot++;
      if (slot >>> this.#chunkShift >= this.#chunks.length) this.#addChunk();
    } else {
      const victim = this.#tail;
      if (victim === NONE) return NONE;
      let h = (Math.imul(victim, 0x9e3779b1) >>> 0) & mmask;
      while (mapSlot[h] !== NONE) {
        if (mapSlot[h] === victim) return NONE;
        h = (h + 1) & mmask;
      }
      this.#evict(victim);
      this.#stats.evictedLru++;
      slot = this.#freeHead;
      this.#freeHead = this.#nextOf(slot);
    }
    this.#initSlot(slot, lo, hi);
    this.#index.set(lo, hi, slot);
    this.#stats.admitted++;
    return slot;
  }

  #initSlot(slot: number, lo: number, hi: number): void {
    const c = this.#openSlot(slot, lo, hi);
    const i = slot & (this.#chunkRows - 1);
    const dim = this.dim;
    if (c.f32 !== null) this.#init(c.f32, i * dim, dim, lo, hi);
    else {
      this.#init(this.#tmp, 0, dim, lo, hi);
      const h = c.f16 as Uint16Array;
      for (let j = 0; j < dim; j++) h[i * dim + j] = toHalf(this.#tmp[j] as number);
    }
    const names = this.optimizer.stateInit;
    const so = i * this.#stateDim;
    for (let k = 0; k < names.length; k++)
      c.state.fill(names[k] as number, so + k * dim, so + (k + 1) * dim);
    this.#closeSlot(slot, lo, hi);
  }

  /**
   * Opens slot's seqlock section (seq odd) and claims it for key (lo, hi); the caller writes
   * its row, then #closeSlot publishes key, live mark and row together (seq even). One
   * section, so a one-sided reader never accepts a row the caller has not written yet.
   */
  #openSlot(slot: number, lo: number, hi: number): Chunk {
    const ci = slot >>> this.#chunkShift;
    this.#beforeWrite(ci);
    const c = this.#chunks[ci] as Chunk;
    const i = slot & (this.#chunkRows - 1);
    if (c.meta !== null) StoreViewWriter.begin(c.meta, i);
    c.keys[2 * i] = lo;
    c.keys[2 * i + 1] = hi;
    c.live[i] = 1;
    c.liveCount++;
    if (c.steps !== null) c.steps[i] = 0;
    return c;
  }

  #closeSlot(slot: number, lo: number, hi: number): void {
    const c = this.#chunks[slot >>> this.#chunkShift] as Chunk;
    const i = slot & (this.#chunkRows - 1);
    if (c.meta !== null) StoreViewWriter.end(c.meta, i, lo, hi, 1);
    if (this.#lru) {
      (c.prev as Int32Array)[i] = NONE;
      (c.next as Int32Array)[i] = NONE;
      this.#linkHead(slot);
    }
  }

  #addChunk(): void {
    const cr = this.#chunkRows;
    const rowBytes = cr * this.#rowStoreBytes;
    const ci = this.#chunks.length;
    const b = this.#view?.chunkRows(ci, rowBytes) ?? this.#slabRows(rowBytes);
    const f32 =
      this.rowDtype === 'f32' ? new Float32Array(b.buffer, b.byteOffset, cr * this.dim) : null;
    const f16 =
      this.rowDtype === 'f16' ? new Uint16Array(b.buffer, b.byteOffset, cr * this.dim) : null;
    const meta = this.#view?.chunkMeta(ci) ?? null;
    const chunk: Chunk = {
      f32,
      f16,
      state: new Float32Array(cr * this.#stateDim),
      keys: new Uint32Array(cr * 2),
      steps: this.optimizer.usesSteps ? new Uint32Array(cr) : null,
      live: new Uint8Array(cr),
      meta,
      prev: this.#lru ? new Int32Array(cr) : null,
      next: this.#lru ? new Int32Array(cr) : null,
      tick: this.#lru ? new Float64Array(cr) : null,
      lastMs: Number.isFinite(this.#ttl) ? new Float64Array(cr) : null,
      liveCount: 0,
      bytes: cr * this.#slotBytes,
    };
    this.#chunks.push(chunk);
    this.#chunkBytes += chunk.bytes;
    const at = this.#rowBufferAt.get(b.buffer) ?? -1;
    const end = b.byteOffset + rowBytes;
    if (at < 0) {
      this.#rowBufferAt.set(b.buffer, this.#rowBuffers.length);
      this.#rowBuffers.push(b.buffer);
      this.#rowBufferEnds.push(end);
    } else if ((this.#rowBufferEnds[at] as number) < end) this.#rowBufferEnds[at] = end;
    this.#k?.addChunk(
      (f32 ?? f16) as Float32Array | Uint16Array,
      chunk.state,
      chunk.steps,
      chunk.lastMs,
      meta,
    );
  }

  // The next chunk's row bytes from the newest slab (a new slab when it is full).
  #slabRows(rowBytes: number): Uint8Array {
    const cr = this.#chunkRows;
    const stride = slabStride(rowBytes);
    let slab = this.#slab;
    if (slab === null || slab.next + stride > slab.bytes.byteLength) {
      // A budgeted table never takes more chunks than its row limit needs.
      const room = Number.isFinite(this.#budget)
        ? Math.ceil(this.#maxRows / cr) - this.#chunks.length
        : Number.POSITIVE_INFINITY;
      const n = slabChunks(this.#chunks.length, room, stride);
      const want = n * stride + SLAB_ALIGN_PAD;
      const block = this.#memory.alloc(want);
      const sb = block.bytes;
      if (!(sb instanceof Uint8Array) || sb.byteLength < want || sb.byteOffset % 8 !== 0) {
        block.release();
        throw new PsError(
          'ERR_PS_INVALID_ARG',
          'row memory returned a block that is too short or not 8-byte aligned',
        );
      }
      this.#adviseHuge?.(sb);
      this.#slabs.push(block);
      // JS kernels cannot see addresses: their rows start at the block (8-byte aligned).
      const skew = this.#bytesToAlign?.(sb) ?? 0;
      slab = { bytes: sb.subarray(skew, skew + n * stride), next: 0 };
      this.#slab = slab;
      this.#slabBytes += want;
    }
    const b = slab.bytes.subarray(slab.next, slab.next + rowBytes);
    slab.next += stride;
    return b;
  }

  #nextOf(slot: number): number {
    return ((this.#chunks[slot >>> this.#chunkShift] as Chunk).next as Int32Array)[
      slot & (this.#chunkRows - 1)
    ] as number;
  }

  #setNext(slot: number, v: number): void {
    ((this.#chunks[slot >>> this.#chunkShift] as Chunk).next as Int32Array)[
      slot & (this.#chunkRows - 1)
    ] = v;
  }

  #setPrev(slot: number, v: number): void {
    ((this.#chunks[slot >>> this.#chunkShift] as Chunk).prev as Int32Array)[
      slot & (this.#chunkRows - 1)
    ] = v;
  }

  #prevOf(slot: number): number {
    return ((this.#chunks[slot >>> this.#chunkShift] as Chunk).prev as Int32Array)[
      slot & (this.#chunkRows - 1)
    ] as number;
  }

  #linkHead(slot: number): void {
    this.#setPrev(slot, NONE);
    this.#setNext(slot, this.#head);
    if (this.#head !== NONE) this.#setPrev(this.#head, slot);
    this.#head = slot;
    if (this.#tail === NONE) this.#tail = slot;
  }

  #unlink(slot: number): void {
    const p = this.#prevOf(slot);
    const nx = this.#nextOf(slot);
    if (p !== NONE) this.#setNext(p, nx);
    else this.#head = nx;
    if (nx !== NONE) this.#setPrev(nx, p);
    else this.#tail = p;
  }

  #touch(slot: number): void {
    if (this.#head === slot) return;
    this.#unlink(slot);
    this.#linkHead(slot);
  }

  #evict(slot: number): void {
    const ci = slot >>> this.#chunkShift;
    this.#beforeWrite(ci);
    const c = this.#chunks[ci] as Chunk;
    const i = slot & (this.#chunkRows - 1);
    const view = this.#view;
    // Index buckets may shift back: readers must not trust an absent key meanwhile.
    view?.beginIndexMove();
    this.#index.delete(c.keys[2 * i] as number, c.keys[2 * i + 1] as number);
    view?.endIndexMove();
    if (c.meta !== null) {
      StoreViewWriter.begin(c.meta, i);
      StoreViewWriter.end(c.meta, i, c.keys[2 * i] as number, c.keys[2 * i + 1] as number, 0);
    }
    c.live[i] = 0;
    c.liveCount--;
    this.#unlink(slot);
    this.#setNext(slot, this.#freeHead);
    this.#freeHead = slot;
  }

  #sweepTtl(nowMs: number): void {
    while (this.#tail !== NONE && this.#expired(this.#tail, nowMs)) {
      this.#evict(this.#tail);
      this.#stats.evictedTtl++;
    }
  }

  // ---- snapshots ------------------------------------------------------------------------

  #beforeWrite(ci: number): void {
    const cow = this.#cow;
    if (cow !== null && ci < cow.length && cow[ci] === 1) {
      (this.#cowCopies as Map<number, CapturedChunk>).set(ci, this.#capture(ci));
      cow[ci] = 0;
    }
  }

  #capture(ci: number): CapturedChunk {
    const c = this.#chunks[ci] as Chunk;
    const n = c.liveCount;
    const dim = this.dim;
    const sd = this.#stateDim;
    const ns = this.optimizer.stateNames.length;
    const keys = new Uint32Array(n * 2);
    const rowsF32 = c.f32 !== null ? new Float32Array(n * dim) : null;
    const rowsF16 = c.f16 !== null ? new Uint16Array(n * dim) : null;
    const state = Array.from({ length: ns }, () => new Float32Array(n * dim));
    const steps = c.steps !== null ? new Uint32Array(n) : null;
    const tick = c.tick !== null ? new Float64Array(n) : null;
    const lastMs = c.lastMs !== null ? new Float64Array(n) : null;
    let k = 0;
    for (let i = 0; i < this.#chunkRows && k < n; i++) {
      if (c.live[i] !== 1) continue;
      keys[2 * k] = c.keys[2 * i] as number;
      keys[2 * k + 1] = c.keys[2 * i + 1] as number;
      if (rowsF32 !== null)
        rowsF32.set((c.f32 as Float32Array).subarray(i * dim, (i + 1) * dim), k * dim);
      if (rowsF16 !== null)
        rowsF16.set((c.f16 as Uint16Array).subarray(i * dim, (i + 1) * dim), k * dim);
      for (let s = 0; s < ns; s++)
        (state[s] as Float32Array).set(
          c.state.subarray(i * sd + s * dim, i * sd + (s + 1) * dim),
          k * dim,
        );
      if (steps !== null) steps[k] = (c.steps as Uint32Array)[i] as number;
      if (tick !== null) tick[k] = (c.tick as Float64Array)[i] as number;
      if (lastMs !== null) lastMs[k] = (c.lastMs as Float64Array)[i] as number;
      k++;
    }
    const u8 = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    return {
      n,
      keys: u8(keys),
      rows: u8((rowsF32 ?? rowsF16) as ArrayBufferView),
      state: state.map(u8),
      steps: steps && u8(steps),
      tick: tick && u8(tick),
      lastMs: lastMs && u8(lastMs),
    };
  }

  /** Starts a snapshot: O(chunks) now, each chunk copied before its next write. */
  beginCapture(): TableCapture {
    this.#checkRowMemory();
    if (this.#cow !== null)
      throw new PsError('ERR_PS_INVALID_ARG', `table ${this.name}: a snapshot is already running`);
    const count = this.#chunks.length;
    this.#cow = new Uint8Array(count).fill(1);
    this.#cowCopies = new Map();
    return {
      rows: this.rows,
      chunkCount: count,
      sketch: this.#sketch === null ? null : this.#sketch.counters.slice(),
      tickCounter: this.#tick,
      take: (ci: number) => {
        const copies = this.#cowCopies as Map<number, CapturedChunk>;
        const copy = copies.get(ci);
        if (copy !== undefined) {
          copies.delete(ci);
          return copy;
        }
        const cow = this.#cow as Uint8Array;
        cow[ci] = 0;
        return this.#capture(ci);
      },
    };
  }

  /** Ends the snapshot started by beginCapture (also after a failed write). */
  endCapture(): void {
    this.#cow = null;
    this.#cowCopies = null;
  }

  /**
   * Loads restored rows into an empty table. Rows go in tick order, so LRU order is what it
   * was when the snapshot was taken.
   */
  load(data: {
    keys: Uint32Array;
    rows: Float32Array | Uint16Array;
    state: Float32Array[];
    steps: Uint32Array | null;
    tick: Float64Array | null;
    lastMs: Float64Array | null;
    sketch: Uint16Array | null;
    tickCounter: number;
  }): void {
    if (this.rows !== 0)
      throw new PsError('ERR_PS_INVALID_ARG', `table ${this.name}: load into a non-empty table`);
    const n = data.keys.length / 2;
    if (n > this.#maxRows)
      throw new PsError(
        'ERR_PS_CONFIG_MISMATCH',
        `table ${this.name}: snapshot has ${n} rows, budget allows ${this.#maxRows}`,
      );
    const order = Array.from({ length: n }, (_, i) => i);
    const tick = data.tick;
    if (tick !== null) order.sort((a, b) => (tick[a] as number) - (tick[b] as number));
    const dim = this.dim;
    const sd = this.#stateDim;
    // Bumped before any slot is published: every hint learned before the load is dropped,
    // even one naming a slot this load fills.
    this.#view?.bumpGeneration();
    for (const k of order) {
      const lo = data.keys[2 * k] as number;
      const hi = data.keys[2 * k + 1] as number;
      if (this.#index.get(lo, hi) >= 0)
        throw new PsError('ERR_PS_CORRUPT', `table ${this.name}: duplicate key in snapshot`);
      const slot = this.#nextSlot++;
      if (slot >>> this.#chunkShift >= this.#chunks.length) this.#addChunk();
      // The restored row goes in inside the slot's one seqlock section: never published
      // with a KeyInit row in between (a hint reader would accept that: seq even, key, live).
      const c = this.#openSlot(slot, lo, hi);
      const i = slot & (this.#chunkRows - 1);
      if (c.f32 !== null)
        c.f32.set((data.rows as Float32Array).subarray(k * dim, (k + 1) * dim), i * dim);
      else
        (c.f16 as Uint16Array).set(
          (data.rows as Uint16Array).subarray(k * dim, (k + 1) * dim),
          i * dim,
        );
      for (let s = 0; s < data.state.length; s++)
        c.state.set(
          (data.state[s] as Float32Array).subarray(k * dim, (k + 1) * dim),
          i * sd + s * dim,
        );
      if (c.steps !== null && data.steps !== null) c.steps[i] = data.steps[k] as number;
      if (c.tick !== null && tick !== null) c.tick[i] = tick[k] as number;
      if (c.lastMs !== null && data.lastMs !== null) c.lastMs[i] = data.lastMs[k] as number;
      this.#closeSlot(slot, lo, hi);
      // Findable only now, with its restored row already published.
      this.#index.set(lo, hi, slot);
    }
    // Bumped after too: a hint learned during the load (of a key it already published) is
    // dropped once the table is complete.
    this.#view?.bumpGeneration();
    if (this.#sketch !== null && data.sketch !== null) this.#sketch.counters.set(data.sketch);
    this.#tick = data.tickCounter;
  }

  /** Returns every chunk's memory. */
  close(): void {
    this.#closed = true;
    this.#k?.clear();
    for (const b of this.#slabs) b.release();
    this.#slabs.length = 0;
    this.#slab = null;
    this.#slabBytes = 0;
    this.#chunks.length = 0;
    this.#rowBuffers.length = 0;
    this.#rowBufferEnds.length = 0;
    this.#rowBufferAt.clear();
  }
}

/** A row's weights, then its state, into old (what `saturate` falls back to). */
function remember(
  old: Float32Array,
  w: Float32Array,
  wo: number,
  dim: number,
  s: Float32Array,
  so: number,
  sd: number,
): void {
  for (let j = 0; j < dim; j++) old[j] = w[wo + j] as number;
  for (let j = 0; j < sd; j++) old[dim + j] = s[so + j] as number;
}

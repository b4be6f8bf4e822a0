import {
  STORE_VIEW,
  STORE_VIEW_HEADER,
  STORE_VIEW_META,
  type StoreViewLayout,
  storeViewLayout,
  writeStoreViewHeader,
} from '@rdmajs/ps-wire';
import { PsError } from './errors.js';
import { ABI } from './internal/abi.js';
import type { RowBlock, RowMemory } from './RowMemory.js';

// The layout (ps-wire) describes what this package and its addon write: their shared numbers
// must agree (the addon bumps seqs in records of ABI.VIEW_META_INTS words).
if (
  ABI.VIEW_META_INTS * 4 !== STORE_VIEW.META_BYTES ||
  ABI.IDX_TAG_PAD !== STORE_VIEW.TAG_PAD ||
  ABI.IDX_BUCKET_INTS * 4 !== STORE_VIEW.BUCKET_BYTES ||
  ABI.IDX_EMPTY !== STORE_VIEW.BUCKET_EMPTY ||
  ABI.ROW_F32 !== STORE_VIEW.ROW_F32 ||
  ABI.ROW_F16 !== STORE_VIEW.ROW_F16
)
  throw new PsError('ERR_PS_NATIVE_LOAD', 'the kernels ABI does not match the store view layout');

const SEQ = STORE_VIEW_META.SEQ;
const INTS = ABI.VIEW_META_INTS;

/**
 * The store side of a one-sided readable table: ONE region from the table's RowMemory laid
 * out as @rdmajs/ps-wire's store view (header, index buckets and tags, a meta record per slot,
 * the rows), carved into the views SparseTable and the kernels use, and the writer half of
 * the seqlock (README "Store view": seq odd before a slot changes, even after).
 *
 * Ordering, JS side: every seq change is an Atomics RMW, which V8 compiles to a full barrier
 * on x86-64 (lock xadd): the plain row and meta stores between cannot be reordered past
 * either seq store, and x86 stores become visible in program order. On arm64 V8's RMW is an
 * acquire/release pair (ldaxr/stlxr), after which a plain row store may become visible
 * before the odd seq: so readable tables are refused off x86-64 (ERR_PS_NOT_SUPPORTED,
 * `checkPlatform`) rather than served torn. The native kernels use release fences
 * (kernels.cc SeqBegin/SeqEnd), which hold on every architecture.
 */
export class StoreViewWriter {
  /** Throws ERR_PS_NOT_SUPPORTED off x86-64 (see the class comment), read at each table. */
  static checkPlatform(table: string): void {
    if (process.arch !== 'x64')
      throw new PsError(
        'ERR_PS_NOT_SUPPORTED',
        `table ${table}: oneSidedRead needs x86-64 (this is ${process.arch}): its JS writers order the seqlock with Atomics, a full barrier only there`,
      );
  }

  static readonly META_BYTES = STORE_VIEW.META_BYTES;
  /** Region bytes beyond index, meta and chunk rows: the header and section alignment. */
  static readonly FIXED_BYTES = STORE_VIEW.HEADER_BYTES + 3 * STORE_VIEW.ALIGN;

  readonly block: RowBlock;
  /** The whole region, header first: what a NIC registers for peers to READ. */
  readonly bytes: Uint8Array;
  readonly layout: StoreViewLayout;
  /** The HashIndex's bucket and tag arrays, inside the region. */
  readonly indexArrays: { buckets: Int32Array; tags: Uint8Array };
  readonly #head: Uint32Array;

  constructor(
    memory: RowMemory,
    shape: {
      name: string;
      dim: number;
      rowDtype: 'f32' | 'f16';
      buckets: number;
      slotCount: number;
      chunkRows: number;
    },
  ) {
    // The salt is in the header (readers hash with it); random, so peers cannot aim keys at
    // one probe chain.
    const salt = Math.floor(Math.random() * 2 ** 32) >>> 0;
    const { name, ...rest } = shape;
    const layout = storeViewLayout({ ...rest, salt });
    const block =
      memory.allocReadable === undefined
        ? memory.alloc(layout.totalBytes)
        : memory.allocReadable(layout.totalBytes, name);
    const b = block.bytes;
    if (!(b instanceof Uint8Array) || b.byteLength < layout.totalBytes || b.byteOffset % 8 !== 0) {
      block.release();
      throw new PsError(
        'ERR_PS_INVALID_ARG',
        `table ${name}: row memory returned a block that is too short or not 8-byte aligned`,
      );
    }
    this.block = block;
    this.layout = layout;
    this.bytes = b.subarray(0, layout.totalBytes);
    // Memory may come back from a pool dirty, and every byte of the region is readable by
    // peers: zero all of it (rows of unused slots, index key words, padding, every seq 0 and
    // not live) so a reader sees only what this table wrote, never what the memory last held.
    this.bytes.fill(0);
    writeStoreViewHeader(this.bytes, layout);
    const at = this.bytes.byteOffset;
    this.#head = new Uint32Array(b.buffer, at, STORE_VIEW.HEADER_BYTES / 4);
    this.indexArrays = {
      buckets: new Int32Array(
        b.buffer,
        at + layout.indexOffset,
        (layout.buckets * STORE_VIEW.BUCKET_BYTES) / 4,
      ),
      tags: new Uint8Array(b.buffer, at + layout.tagsOffset, layout.buckets + ABI.IDX_TAG_PAD),
    };
  }

  /** Region bytes that hold neither the index nor meta records (header, rows, padding). */
  get rowSectionBytes(): number {
    const l = this.layout;
    return (
      l.totalBytes -
      l.buckets * STORE_VIEW.BUCKET_BYTES -
      (l.buckets + ABI.IDX_TAG_PAD) -
      l.slotCount * STORE_VIEW.META_BYTES
    );
  }

  /** Chunk ci's rows (`rowBytes` of its stride). */
  chunkRows(ci: number, rowBytes: number): Uint8Array {
    const at = this.layout.rowsOffset + ci * this.layout.chunkStride;
    return this.bytes.subarray(at, at + rowBytes);
  }

  /** Chunk ci's meta records (VIEW_META_INTS words per slot). */
  chunkMeta(ci: number): Uint32Array {
    const cr = this.layout.chunkRows;
    return new Uint32Array(
      this.bytes.buffer,
      this.bytes.byteOffset + this.layout.metaOffset + ci * cr * STORE_VIEW.META_BYTES,
      cr * INTS,
    );
  }

  /** Seq of slot i of a chunk's meta made odd: its row or meta is about to change. */
  static begin(meta: Uint32Array, i: number): void {
    Atomics.add(meta, i * INTS, 1);
  }

  /**
   * The change is complete: the key and live mark written (when given), then seq even again.
   */
  static end(meta: Uint32Array, i: number, lo?: number, hi?: number, live?: number): void {
    const r = i * INTS;
    if (live !== undefined) {
      meta[r + STORE_VIEW_META.KEY_LO] = lo as number;
      meta[r + STORE_VIEW_META.KEY_HI] = hi as number;
      meta[r + STORE_VIEW_META.LIVE] = live;
    }
    Atomics.add(meta, r + SEQ, 1);
  }

  /** Index seq odd: buckets are about to move (readers retry keys they find absent). */
  beginIndexMove(): void {
    Atomics.add(this.#head, STORE_VIEW_HEADER.INDEX_SEQ / 4, 1);
  }

  endIndexMove(): void {
    Atomics.add(this.#head, STORE_VIEW_HEADER.INDEX_SEQ / 4, 1);
  }

  /** The table's contents were replaced (restore). */
  bumpGeneration(): void {
    Atomics.add(this.#head, STORE_VIEW_HEADER.GENERATION / 4, 1);
  }
}

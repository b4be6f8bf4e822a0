import { PsWireError } from './errors.js';

/**
 * The layout of a one-sided readable table ("store view"): ONE region of shard memory that
 * the shard writes and clients only READ (FaRM/Pilaf style fetches, the shard is never woken).
 * The store (ps-server SparseTable with `oneSidedRead`) builds it with `storeViewLayout` and
 * `writeStoreViewHeader`; a client decodes the header with `decodeStoreViewHeader` (the bytes
 * come from an untrusted peer) and reads through StoreViewReader. README "Store view" has the
 * table of offsets and the seqlock protocol.
 */
export const STORE_VIEW = Object.freeze({
  /** "PSVW" little-endian. */
  MAGIC: 0x57565350,
  VERSION: 1,
  HEADER_BYTES: 128,
  /** Sections start at multiples of this (a cache line). */
  ALIGN: 64,
  /** HashIndex bucket: lo i32, hi i32, value i32 (slot, EMPTY −1). */
  BUCKET_BYTES: 12,
  BUCKET_EMPTY: -1,
  /** Tag bytes mirrored past the last bucket (HashIndex; the reader does not use tags). */
  TAG_PAD: 16,
  /** Per slot: seq u32, key lo u32, key hi u32, live u32. */
  META_BYTES: 16,
  ROW_F32: 0,
  ROW_F16: 1,
  MAX_DIM: 4096,
  MAX_BUCKETS: 2 ** 29,
  MAX_SLOTS: 2 ** 31 - 1,
  MAX_CHUNK_ROWS: 2 ** 24,
});

/** Byte offsets of the header fields (u32 unless noted; u64 as lo, hi u32 words). */
export const STORE_VIEW_HEADER = Object.freeze({
  MAGIC: 0,
  VERSION: 4,
  HEADER_BYTES: 8,
  DIM: 12,
  ROW_DTYPE: 16,
  ROW_BYTES: 20,
  BUCKETS: 24,
  SALT: 28,
  SLOT_COUNT: 32,
  CHUNK_ROWS: 36,
  META_BYTES: 40,
  /** u64 fields. */
  CHUNK_STRIDE: 48,
  INDEX_OFFSET: 56,
  TAGS_OFFSET: 64,
  META_OFFSET: 72,
  ROWS_OFFSET: 80,
  TOTAL_BYTES: 88,
  /** Written while the table lives: bumped when its contents are replaced (restore, clear). */
  GENERATION: 96,
  /** Odd while index buckets move (a delete's backward shift); see the README's protocol. */
  INDEX_SEQ: 100,
});

/** Meta record fields, in u32 words from the slot's record. */
export const STORE_VIEW_META = Object.freeze({ SEQ: 0, KEY_LO: 1, KEY_HI: 2, LIVE: 3 });

export interface StoreViewShape {
  dim: number;
  rowDtype: 'f32' | 'f16';
  /** Index buckets (a power of two). */
  buckets: number;
  salt: number;
  /** Row slots (a multiple of chunkRows). */
  slotCount: number;
  /** Rows per chunk (a power of two); chunks lie chunkStride bytes apart in the rows section. */
  chunkRows: number;
}

export interface StoreViewLayout extends StoreViewShape {
  rowBytes: number;
  chunkStride: number;
  indexOffset: number;
  tagsOffset: number;
  metaOffset: number;
  rowsOffset: number;
  totalBytes: number;
  /** The generation when the header was read. */
  generation: number;
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;
const isPow2 = (n: number) => Number.isInteger(n) && n >= 1 && (n & (n - 1)) === 0;

/** Offsets and size of the region of a table of this shape (the store allocates totalBytes). */
export function storeViewLayout(shape: StoreViewShape): StoreViewLayout {
  const { dim, buckets, slotCount, chunkRows } = shape;
  const bad = (m: string) => new PsWireError('ERR_PS_WIRE_INVALID_ARG', `store view: ${m}`);
  if (!Number.isInteger(dim) || dim < 1 || dim > STORE_VIEW.MAX_DIM) throw bad('bad dim');
  if (shape.rowDtype !== 'f32' && shape.rowDtype !== 'f16') throw bad('bad row dtype');
  if (!isPow2(buckets) || buckets < 2 || buckets > STORE_VIEW.MAX_BUCKETS)
    throw bad('buckets must be a power of two in [2, 2^29]');
  if (!isPow2(chunkRows) || chunkRows > STORE_VIEW.MAX_CHUNK_ROWS) throw bad('bad chunkRows');
  if (!Number.isInteger(slotCount) || slotCount < 1 || slotCount > STORE_VIEW.MAX_SLOTS)
    throw bad('bad slotCount');
  if (slotCount % chunkRows !== 0) throw bad('slotCount must be a multiple of chunkRows');
  const A = STORE_VIEW.ALIGN;
  const rowBytes = dim * (shape.rowDtype === 'f32' ? 4 : 2);
  const chunkStride = alignUp(chunkRows * rowBytes, A);
  const indexOffset = STORE_VIEW.HEADER_BYTES;
  const tagsOffset = alignUp(indexOffset + buckets * STORE_VIEW.BUCKET_BYTES, A);
  const metaOffset = alignUp(tagsOffset + buckets + STORE_VIEW.TAG_PAD, A);
  const rowsOffset = alignUp(metaOffset + slotCount * STORE_VIEW.META_BYTES, A);
  const totalBytes = rowsOffset + (slotCount / chunkRows) * chunkStride;
  return {
    dim,
    rowDtype: shape.rowDtype,
    buckets,
    salt: shape.salt >>> 0,
    slotCount,
    chunkRows,
    rowBytes,
    chunkStride,
    indexOffset,
    tagsOffset,
    metaOffset,
    rowsOffset,
    totalBytes,
    generation: 0,
  };
}

/** Byte offset of a slot's row in the region. */
export function storeViewRowOffset(l: StoreViewLayout, slot: number): number {
  const c = Math.floor(slot / l.chunkRows);
  return l.rowsOffset + c * l.chunkStride + (slot - c * l.chunkRows) * l.rowBytes;
}

function putU64(v: DataView, at: number, n: number): void {
  v.setUint32(at, n % 2 ** 32, true);
  v.setUint32(at + 4, Math.floor(n / 2 ** 32), true);
}

/** Writes the header of `layout` at bytes[0 … HEADER_BYTES) (generation and index seq 0). */
export function writeStoreViewHeader(bytes: Uint8Array, l: StoreViewLayout): void {
  const H = STORE_VIEW_HEADER;
  const v = new DataView(bytes.buffer, bytes.byteOffset, STORE_VIEW.HEADER_BYTES);
  bytes.fill(0, 0, STORE_VIEW.HEADER_BYTES);
  v.setUint32(H.MAGIC, STORE_VIEW.MAGIC, true);
  v.setUint32(H.VERSION, STORE_VIEW.VERSION, true);
  v.setUint32(H.HEADER_BYTES, STORE_VIEW.HEADER_BYTES, true);
  v.setUint32(H.DIM, l.dim, true);
  v.setUint32(H.ROW_DTYPE, l.rowDtype === 'f32' ? STORE_VIEW.ROW_F32 : STORE_VIEW.ROW_F16, true);
  v.setUint32(H.ROW_BYTES, l.rowBytes, true);
  v.setUint32(H.BUCKETS, l.buckets, true);
  v.setUint32(H.SALT, l.salt >>> 0, true);
  v.setUint32(H.SLOT_COUNT, l.slotCount, true);
  v.setUint32(H.CHUNK_ROWS, l.chunkRows, true);
  v.setUint32(H.META_BYTES, STORE_VIEW.META_BYTES, true);
  putU64(v, H.CHUNK_STRIDE, l.chunkStride);
  putU64(v, H.INDEX_OFFSET, l.indexOffset);
  putU64(v, H.TAGS_OFFSET, l.tagsOffset);
  putU64(v, H.META_OFFSET, l.metaOffset);
  putU64(v, H.ROWS_OFFSET, l.rowsOffset);
  putU64(v, H.TOTAL_BYTES, l.totalBytes);
}

/**
 * Decodes and validates a header read from a peer: every field in range, every section exactly
 * where storeViewLayout puts it for the shape, and totalBytes ≤ regionBytes (the length the
 * region was advertised with) — so nothing the reader plans from it leaves the region.
 * Anything else is a PsWireError (ERR_PS_WIRE_TRUNCATED, _VERSION or _FIELD with the offset).
 */
export function decodeStoreViewHeader(bytes: Uint8Array, regionBytes: number): StoreViewLayout {
  const H = STORE_VIEW_HEADER;
  if (!(bytes instanceof Uint8Array) || bytes.byteLength < STORE_VIEW.HEADER_BYTES)
    throw new PsWireError('ERR_PS_WIRE_TRUNCATED', 'store view header: fewer than 128 bytes');
  if (!Number.isSafeInteger(regionBytes) || regionBytes < STORE_VIEW.HEADER_BYTES)
    throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'store view: regionBytes out of range');
  const v = new DataView(bytes.buffer, bytes.byteOffset, STORE_VIEW.HEADER_BYTES);
  const u32 = (at: number) => v.getUint32(at, true);
  const field = (at: number, what: string): never => {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `store view header: ${what}`, { offset: at });
  };
  const u64 = (at: number): number => {
    const hi = u32(at + 4);
    if (hi >= 2 ** 21) field(at, 'a 64-bit field beyond 2^53');
    return hi * 2 ** 32 + u32(at);
  };
  if (u32(H.MAGIC) !== STORE_VIEW.MAGIC) field(H.MAGIC, 'bad magic');
  if (u32(H.VERSION) !== STORE_VIEW.VERSION)
    throw new PsWireError('ERR_PS_WIRE_VERSION', `store view layout ${u32(H.VERSION)}`, {
      offset: H.VERSION,
    });
  if (u32(H.HEADER_BYTES) !== STORE_VIEW.HEADER_BYTES) field(H.HEADER_BYTES, 'header size');
  if (u32(H.META_BYTES) !== STORE_VIEW.META_BYTES) field(H.META_BYTES, 'meta record size');
  const dim = u32(H.DIM);
  if (dim < 1 || dim > STORE_VIEW.MAX_DIM) field(H.DIM, 'dim out of range');
  const dt = u32(H.ROW_DTYPE);
  if (dt !== STORE_VIEW.ROW_F32 && dt !== STORE_VIEW.ROW_F16) field(H.ROW_DTYPE, 'row dtype');
  const rowBytes = u32(H.ROW_BYTES);
  if (rowBytes !== dim * (dt === STORE_VIEW.ROW_F32 ? 4 : 2)) field(H.ROW_BYTES, 'row bytes');
  const buckets = u32(H.BUCKETS);
  if (!isPow2(buckets) || buckets < 2 || buckets > STORE_VIEW.MAX_BUCKETS)
    field(H.BUCKETS, 'bucket count');
  const slotCount = u32(H.SLOT_COUNT);
  if (slotCount < 1 || slotCount > STORE_VIEW.MAX_SLOTS) field(H.SLOT_COUNT, 'slot count');
  const chunkRows = u32(H.CHUNK_ROWS);
  if (!isPow2(chunkRows) || chunkRows > STORE_VIEW.MAX_CHUNK_ROWS || slotCount % chunkRows !== 0)
    field(H.CHUNK_ROWS, 'chunk rows');
  // The sections are where this layout version puts them for this shape, exactly (so each is
  // inside the region and in order by construction): any other offset is refused.
  const l = storeViewLayout({
    dim,
    rowDtype: dt === STORE_VIEW.ROW_F32 ? 'f32' : 'f16',
    buckets,
    salt: u32(H.SALT),
    slotCount,
    chunkRows,
  });
  const placed: Array<[number, number]> = [
    [H.CHUNK_STRIDE, l.chunkStride],
    [H.INDEX_OFFSET, l.indexOffset],
    [H.TAGS_OFFSET, l.tagsOffset],
    [H.META_OFFSET, l.metaOffset],
    [H.ROWS_OFFSET, l.rowsOffset],
    [H.TOTAL_BYTES, l.totalBytes],
  ];
  for (const [at, want] of placed) if (u64(at) !== want) field(at, 'not where the layout puts it');
  if (l.totalBytes > regionBytes) field(H.TOTAL_BYTES, 'region larger than advertised');
  l.generation = u32(H.GENERATION);
  return l;
}

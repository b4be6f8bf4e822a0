import { hash64, STORE_VIEW_HEADER, storeViewLayout, writeStoreViewHeader } from '../src/index.js';

/**
 * A hand-written store view (what a shard's writer would leave): dim 2, f32, 16 buckets,
 * 4 slots, every bucket empty; tests place keys, metas and rows by hand.
 */
export function handRegion(salt: number) {
  const layout = storeViewLayout({
    dim: 2,
    rowDtype: 'f32',
    buckets: 16,
    salt,
    slotCount: 4,
    chunkRows: 4,
  });
  const bytes = new Uint8Array(layout.totalBytes);
  writeStoreViewHeader(bytes, layout);
  const u32 = new Uint32Array(bytes.buffer);
  const i32 = new Int32Array(bytes.buffer);
  const f32 = new Float32Array(bytes.buffer);
  const bucket = (b: number) => (layout.indexOffset + (b & 15) * 12) / 4;
  for (let b = 0; b < 16; b++) i32[bucket(b) + 2] = -1;
  const home = (lo: number) => hash64(lo, 0, layout.salt) & 15;
  const metaAt = (slot: number) => (layout.metaOffset + slot * 16) / 4;
  return {
    layout,
    bytes,
    u32,
    i32,
    /** u32 index of bucket b's record (wrapping). */
    bucket,
    /** Home bucket of key (lo, 0). */
    home,
    /**
     * Key lo (hi 0) at slot with row [v, v]: in the first bucket from its home that is empty
     * or already its own, meta live with this seq.
     */
    put(lo: number, slot: number, v: number, seq = 2) {
      let b = home(lo);
      while ((i32[bucket(b) + 2] as number) >= 0 && i32[bucket(b)] !== lo) b++;
      i32.set([lo, 0, slot], bucket(b));
      u32.set([seq, lo, 0, 1], metaAt(slot));
      f32.set([v, v], (layout.rowsOffset + slot * 8) / 4);
    },
    /** Removes lo from its home bucket (the tests that use this place no collisions). */
    unindex(lo: number) {
      i32[bucket(home(lo)) + 2] = -1;
    },
    meta(slot: number): Uint32Array {
      return u32.subarray(metaAt(slot), metaAt(slot) + 4);
    },
    bumpGeneration() {
      u32[STORE_VIEW_HEADER.GENERATION / 4] = (u32[STORE_VIEW_HEADER.GENERATION / 4] as number) + 1;
    },
  };
}

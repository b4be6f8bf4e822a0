import { describe, expect, it, vi } from 'vitest';
import {
  type InitFn,
  localViewRead,
  PsWireError,
  readStoreView,
  StoreViewReader,
  StoreViewSlotCache,
  ViewKeyStatus,
  type ViewReadFn,
} from '../src/index.js';
import { handRegion } from './handRegion.js';

/** Absent keys read as −1 (no stored row here is negative). */
const INIT: InitFn = (out, at, dim) => {
  out.fill(-1, at, at + dim);
};

/** Key 11 at slot 2 (row 5), read once through the index: hinted from then on. */
async function hinted() {
  const r = handRegion(7);
  r.put(11, 2, 5);
  const cache = new StoreViewSlotCache(64);
  const s = setup(r, cache);
  await s.get([11]);
  return { r, cache, ...s };
}

/** A reader sharing `cache`, and a read fn counting READs and rounds. */
function setup(r: ReturnType<typeof handRegion>, cache: StoreViewSlotCache) {
  const reader = new StoreViewReader(r.layout, {
    maxKeys: 4,
    init: INIT,
    slotCache: cache,
  });
  const plain = localViewRead(r.bytes);
  const count = { reads: 0, rounds: 0 };
  const read: ViewReadFn = (list, scratch, out) => {
    count.reads += list.count;
    count.rounds++;
    return plain(list, scratch, out);
  };
  const get = async (keys: number[]) => {
    const k32 = new Uint32Array(2 * keys.length);
    keys.forEach((k, i) => {
      k32[2 * i] = k;
    });
    const out = new Float32Array(2 * keys.length);
    count.reads = 0;
    count.rounds = 0;
    const left = await readStoreView(reader, k32, keys.length, out, read, 4);
    expect(left).toBe(0);
    return keys.map((_, i) => out[2 * i]);
  };
  return { reader, count, get };
}

describe('store view slot cache', () => {
  it('a key read once is read next as meta, row, meta in one round', async () => {
    const r = handRegion(7);
    r.put(11, 2, 5);
    r.put(12, 1, 6);
    const cache = new StoreViewSlotCache(64);
    const { count, get } = setup(r, cache);
    expect(await get([11, 12, 13])).toEqual([5, 6, -1]);
    // Two epoch reads, a window each (two READs if it wraps), then meta, row, meta of the
    // two found keys.
    expect(count.rounds).toBe(2);
    expect(count.reads).toBeGreaterThanOrEqual(2 + 3 + 6);
    expect(cache.lookup(11, 0)).toBe(2);
    expect(cache.lookup(13, 0)).toBe(-1); // absent keys are not hinted
    expect(await get([11, 12])).toEqual([5, 6]);
    expect(count).toEqual({ reads: 2 + 6, rounds: 1 });
    expect(cache.hits).toBe(2);
    expect(cache.stale).toBe(0);
  });

  it('a hinted slot reused by another key: the hint is dropped, the key read through the index', async () => {
    const { r, cache, get } = await hinted();
    // 11 evicted, its slot taken by 21; 11 admitted again in slot 3.
    r.unindex(11);
    r.put(21, 2, 8, 4);
    r.put(11, 3, 9);
    expect(await get([11, 21])).toEqual([9, 8]);
    expect(cache.stale).toBe(1);
    expect(cache.lookup(11, 0)).toBe(3);
  });

  it('a hinted key evicted (not live, not indexed) reads as absent through the index, never from the hint', async () => {
    const { r, cache, get } = await hinted();
    r.unindex(11);
    r.meta(2).set([4, 11, 0, 0]);
    expect(await get([11])).toEqual([-1]);
    expect(cache.stale).toBe(1);
    expect(cache.lookup(11, 0)).toBe(-1);
  });

  it('a hint whose slot is being written is not accepted (odd seq): the index read retries', async () => {
    const { r, cache, reader } = await hinted();
    const m = r.meta(2);
    m[0] = 3; // a write in flight that never ends: nothing is accepted, the key falls back
    const out = new Float32Array(2);
    const left = await readStoreView(
      reader,
      Uint32Array.of(11, 0),
      1,
      out,
      localViewRead(r.bytes),
      2,
    );
    expect(left).toBe(1);
    expect(reader.status[0]).toBe(ViewKeyStatus.FALLBACK);
    expect(cache.hits).toBe(0);
  });

  it('a load (generation bumped) invalidates every hint, even one whose old slot still looks right', async () => {
    const { r, cache, get, count } = await hinted();
    // A restore moved 11 to slot 0 with another row; slot 2 still holds the old, valid-looking
    // record. Only the generation tells them apart.
    r.unindex(11);
    r.put(11, 0, 7);
    r.bumpGeneration();
    expect(await get([11])).toEqual([7]);
    expect(cache.generation).toBe(1);
    expect(cache.lookup(11, 0)).toBe(0);
    expect(count.rounds).toBe(3); // the hinted round, then the index and row rounds
  });

  it('a full set keeps a key looked up since (second chance): a hot key outlives one-off keys', () => {
    const cache = new StoreViewSlotCache(4); // one set of 4
    cache.remember(1, 0, 1, 0);
    for (let k = 100; k < 200; k++) {
      expect(cache.lookup(1, 0)).toBe(1); // hot: looked up between every insertion
      cache.remember(k, 0, 2, 0);
    }
    expect(cache.lookup(1, 0)).toBe(1);
    expect(cache.lookup(199, 0)).toBe(2);
  });

  it('a moved generation makes every older hint no hint at once, without clearing the cache', () => {
    const cache = new StoreViewSlotCache(1 << 12); // 16 keys fit without replacing any
    for (let k = 0; k < 16; k++) cache.remember(k, 0, k, 0);
    expect(cache.lookup(3, 0)).toBe(3);
    cache.observe(1);
    for (let k = 0; k < 16; k++) expect(cache.lookup(k, 0)).toBe(-1);
    // Entries of the old generation are free places for the new one's.
    for (let k = 0; k < 16; k++) cache.remember(k, 0, 40 + k, 1);
    for (let k = 0; k < 16; k++) expect(cache.lookup(k, 0)).toBe(40 + k);
    // A shard flipping its generation every batch: each flip is O(1), and only the current
    // generation's hints count, and no flip clears the cache (no fill of its arrays).
    const fills = vi.spyOn(Int32Array.prototype, 'fill');
    try {
      for (let g = 2; g < 10_000; g++) cache.observe(g);
      expect(fills).not.toHaveBeenCalled();
    } finally {
      fills.mockRestore();
    }
    expect(cache.generation).toBe(9_999);
    expect(cache.lookup(3, 0)).toBe(-1);
    // A slower reader of an older generation does not move it back.
    cache.observe(9_000);
    expect(cache.generation).toBe(9_999);
  });

  it('is bounded: a full set replaces an entry; a bad capacity is a typed error', () => {
    const cache = new StoreViewSlotCache(8);
    expect(cache.capacity).toBe(8);
    for (let k = 0; k < 1000; k++) cache.remember(k, 0, k % 4, 0);
    let held = 0;
    for (let k = 0; k < 1000; k++) if (cache.lookup(k, 0) >= 0) held++;
    expect(held).toBeLessThanOrEqual(8);
    expect(held).toBeGreaterThan(0);
    cache.remember(5000, 0, 3, 1); // another generation than the cache's: not remembered
    expect(cache.lookup(5000, 0)).toBe(-1);
    expect(() => new StoreViewSlotCache(3)).toThrow(PsWireError);
    expect(() => new StoreViewSlotCache(1.5)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }),
    );
  });
});

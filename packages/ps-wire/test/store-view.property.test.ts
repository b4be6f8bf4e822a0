import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeStoreViewHeader,
  initRowFn,
  localViewRead,
  PsWireError,
  readStoreView,
  resolveInit,
  STORE_VIEW,
  STORE_VIEW_HEADER,
  type StoreViewLayout,
  StoreViewReader,
  StoreViewSlotCache,
  storeViewLayout,
  ViewKeyStatus,
  type ViewReadFn,
  writeStoreViewHeader,
} from '../src/index.js';
import { handRegion } from './handRegion.js';

const shape = fc.record({
  dim: fc.integer({ min: 1, max: 4096 }),
  rowDtype: fc.constantFrom<'f32' | 'f16'>('f32', 'f16'),
  buckets: fc.integer({ min: 1, max: 16 }).map((e) => 2 ** e),
  salt: fc.nat(),
  chunkRows: fc.integer({ min: 0, max: 8 }).map((e) => 2 ** e),
  chunks: fc.integer({ min: 1, max: 4 }),
});

type Shape = typeof shape extends fc.Arbitrary<infer T> ? T : never;

function headerOf(s: Shape): { bytes: Uint8Array; layout: StoreViewLayout } {
  const layout = storeViewLayout({ ...s, slotCount: s.chunks * s.chunkRows });
  const bytes = new Uint8Array(STORE_VIEW.HEADER_BYTES);
  writeStoreViewHeader(bytes, layout);
  return { bytes, layout };
}

/** localViewRead, counting the READs (it refuses any range outside the region). */
function strictRead(region: Uint8Array, reads: { n: number }): ViewReadFn {
  const read = localViewRead(region);
  return (list, scratch, out) => {
    reads.n += list.count;
    return read(list, scratch, out);
  };
}

/** The layout's checks: every section in the region, in order. */
function inside(l: StoreViewLayout, regionBytes: number): boolean {
  return (
    l.indexOffset >= STORE_VIEW.HEADER_BYTES &&
    l.indexOffset + l.buckets * STORE_VIEW.BUCKET_BYTES <= l.tagsOffset &&
    l.tagsOffset + l.buckets + STORE_VIEW.TAG_PAD <= l.metaOffset &&
    l.metaOffset + l.slotCount * STORE_VIEW.META_BYTES <= l.rowsOffset &&
    l.rowsOffset + (l.slotCount / l.chunkRows) * l.chunkStride <= l.totalBytes &&
    l.totalBytes <= regionBytes
  );
}

describe('store view header', () => {
  it('round-trips every valid shape', () => {
    fc.assert(
      fc.property(shape, (s) => {
        const { bytes, layout } = headerOf(s);
        expect(decodeStoreViewHeader(bytes, layout.totalBytes)).toEqual(layout);
      }),
    );
  });

  it('random bytes are refused with a typed error (or decode to a layout inside the region)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 0, maxLength: 160 }),
        fc.integer({ min: 128, max: 2 ** 40 }),
        (bytes, region) => {
          try {
            expect(inside(decodeStoreViewHeader(bytes, region), region)).toBe(true);
          } catch (err) {
            expect(err).toBeInstanceOf(PsWireError);
          }
        },
      ),
    );
  });

  it('a mutated valid header is refused with a typed error or stays inside the region', () => {
    fc.assert(
      fc.property(
        shape,
        fc.array(fc.tuple(fc.integer({ min: 0, max: 127 }), fc.nat(255)), {
          minLength: 1,
          maxLength: 6,
        }),
        fc.integer({ min: -64, max: 64 }),
        (s, flips, slack) => {
          const { bytes, layout } = headerOf(s);
          for (const [at, v] of flips) bytes[at] = v;
          const region = Math.max(128, layout.totalBytes + slack);
          try {
            const l = decodeStoreViewHeader(bytes, region);
            expect(inside(l, region)).toBe(true);
          } catch (err) {
            expect(err).toBeInstanceOf(PsWireError);
            expect((err as PsWireError).code).toMatch(
              /^ERR_PS_WIRE_(FIELD|VERSION|TRUNCATED|INVALID_ARG)$/,
            );
          }
        },
      ),
    );
  });
});

describe('store view reader against a hostile shard', () => {
  it('any accepted header and any region bytes: every READ stays inside, reads end, keys DONE or FALLBACK', async () => {
    await fc.assert(
      fc.asyncProperty(
        shape.filter((s) => s.dim <= 64 && s.chunkRows * s.chunks <= 64),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 127 }), fc.nat(255)), { maxLength: 4 }),
        fc.uint8Array({ minLength: 64, maxLength: 4096 }),
        fc.array(fc.tuple(fc.nat(), fc.nat()), { minLength: 1, maxLength: 16 }),
        fc.integer({ min: 1, max: 6 }),
        fc.option(fc.array(fc.integer({ min: -1, max: 2 ** 31 - 1 }), { maxLength: 16 })),
        async (s, flips, noise, keys, attempts, hints) => {
          const { bytes, layout: honest } = headerOf(s);
          for (const [at, v] of flips) bytes[at] = v;
          // The shard's region: the header, then garbage (buckets, metas and rows it forged).
          const region = new Uint8Array(honest.totalBytes);
          for (let i = 0; i < region.length; i++) region[i] = noise[i % noise.length] as number;
          region.set(bytes);
          let layout: StoreViewLayout;
          try {
            layout = decodeStoreViewHeader(region, region.byteLength);
          } catch (err) {
            expect(err).toBeInstanceOf(PsWireError);
            return;
          }
          // Slot hints for some keys (any slot, in range or not): they too are only hints.
          const slotCache = new StoreViewSlotCache(64);
          slotCache.observe(layout.generation);
          keys.forEach(([lo, hi], i) => {
            const slot = hints?.[i] ?? -1;
            if (slot >= 0) slotCache.remember(lo >>> 0, hi >>> 0, slot, layout.generation);
          });
          const reader = new StoreViewReader(layout, {
            maxKeys: 16,
            init: initRowFn(resolveInit({ kind: 'uniform', seed: 3 })),
            ...(hints === null ? {} : { slotCache }),
          });
          const k32 = Uint32Array.from(keys.flat());
          const n = keys.length;
          const out = new Float32Array(n * layout.dim);
          const reads = { n: 0 };
          const left = await readStoreView(
            reader,
            k32,
            n,
            out,
            strictRead(region, reads),
            attempts,
          );
          expect(left).toBe(reader.count(ViewKeyStatus.FALLBACK));
          expect(reader.count(ViewKeyStatus.DONE) + left).toBe(n);
          // Bounded work: per attempt two epoch reads, ≤ 2 window reads and 3 row reads a key
          // (and one more round for hinted keys).
          expect(reads.n).toBeLessThanOrEqual((attempts + (hints === null ? 0 : 1)) * (2 + 5 * n));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('a probe chain read over attempts is not trusted across a bucket move (absent → RETRY)', async () => {
    const { layout, bytes: region, u32, i32, bucket, home: homeOf, put } = handRegion(99);
    const K = [7, 0];
    const home = homeOf(7);
    // Another key X sits in K's home bucket, K one past it in slot 2.
    i32.set([1234, 0, 1], bucket(home));
    put(7, 2, 5, 0);
    const reader = new StoreViewReader(layout, {
      maxKeys: 1,
      init: initRowFn(resolveInit({ kind: 'uniform', seed: 1 })),
      windowBuckets: 1,
    });
    const plain = localViewRead(region);
    let rounds = 0;
    const read: ViewReadFn = (list, scratch, out) => {
      plain(list, scratch, out);
      // After the first window: X is deleted, K shifts back into its home bucket, and the
      // index seq moves on (odd during the shift, even after).
      if (++rounds === 1) {
        i32.set([7, 0, 2], bucket(home));
        i32[bucket(home + 1) + 2] = -1;
        u32[STORE_VIEW_HEADER.INDEX_SEQ / 4] = 2;
      }
    };
    const out = new Float32Array(2);
    expect(await readStoreView(reader, Uint32Array.from(K), 1, out, read, 4)).toBe(0);
    expect(Array.from(out)).toEqual([5, 5]);
    // Without the chain check the second window (home + 1, now empty) would have made K absent.
    expect(rounds).toBeGreaterThanOrEqual(3);
  });

  it('a forged bucket naming a slot past the table is never READ (the key retries, then falls back)', async () => {
    for (const slot of [4, 5, 2 ** 20, 2 ** 31 - 1]) {
      const { layout, bytes: region, i32, bucket, home } = handRegion(5);
      // The key's home bucket names a slot the table does not have (slotCount 4).
      i32.set([9, 0, slot], bucket(home(9)));
      const reader = new StoreViewReader(layout, {
        maxKeys: 1,
        init: initRowFn(resolveInit({ kind: 'uniform', seed: 1 })),
        windowBuckets: 1,
      });
      const reads = { n: 0 };
      const out = new Float32Array(2);
      // strictRead throws on any range outside the region: none may be planned.
      expect(
        await readStoreView(reader, Uint32Array.of(9, 0), 1, out, strictRead(region, reads), 3),
      ).toBe(1);
      expect(reader.status[0]).toBe(ViewKeyStatus.FALLBACK);
      // Each attempt: the two epoch words and the one-bucket window, never a meta or row.
      expect(reads.n).toBe(3 * 3);
    }
  });

  it('refuses batches beyond its size and a too-small scratch with typed errors', () => {
    const layout = storeViewLayout({
      dim: 4,
      rowDtype: 'f32',
      buckets: 16,
      salt: 1,
      slotCount: 8,
      chunkRows: 8,
    });
    const init = initRowFn(resolveInit(undefined));
    const r = new StoreViewReader(layout, { maxKeys: 2, init });
    expect(() => r.begin(new Uint32Array(6), 3)).toThrow(PsWireError);
    expect(
      () => new StoreViewReader(layout, { maxKeys: 2, init, scratch: new Uint8Array(8) }),
    ).toThrow(expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }));
  });
});

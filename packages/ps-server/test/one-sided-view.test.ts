import {
  decodeStoreViewHeader,
  type InitConfig,
  initRowFn,
  localViewRead,
  readStoreView,
  resolveInit,
  STORE_VIEW,
  STORE_VIEW_HEADER,
  StoreViewReader,
  StoreViewSlotCache,
  ViewKeyStatus,
  type ViewReadFn,
} from '@rdmajs/ps-wire';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import {
  ParameterStore,
  SparseTable,
  type SparseTableConfig,
  StoreViewWriter,
} from '../src/index.js';
import { bits, tmpDir } from './helpers.js';

function readerFor(
  table: SparseTable,
  maxKeys: number,
  init?: InitConfig,
  windowBuckets = 8,
  slotCache?: StoreViewSlotCache,
) {
  const view = table.storeView;
  if (view === null) throw new Error('not a readable table');
  const layout = decodeStoreViewHeader(view.bytes, view.bytes.byteLength);
  const reader = new StoreViewReader(layout, {
    maxKeys,
    init: initRowFn(resolveInit(init)),
    windowBuckets,
    ...(slotCache === undefined ? {} : { slotCache }),
  });
  return { reader, read: localViewRead(view.bytes) };
}

/** Every slot's seq is even (no write left open). */
function seqsEven(table: SparseTable): boolean {
  const v = table.storeView;
  if (v === null) return false;
  const l = v.layout;
  const m = new Uint32Array(v.bytes.buffer, v.bytes.byteOffset + l.metaOffset, l.slotCount * 4);
  for (let s = 0; s < l.slotCount; s++) if (((m[4 * s] as number) & 1) !== 0) return false;
  return true;
}

const k32Of = (keys: number[]) => {
  const k = new Uint32Array(2 * keys.length);
  keys.forEach((key, i) => {
    k[2 * i] = key >>> 0;
    k[2 * i + 1] = key % 3; // a few keys differ in their high half only
  });
  return k;
};

/** A snapshot of three dim-3 rows of a 'sum' table: keys' rows are 1s, 2s and 3s. */
const threeRows = (keys: Uint32Array) => ({
  keys,
  rows: Float32Array.of(1, 1, 1, 2, 2, 2, 3, 3, 3),
  state: [],
  steps: null,
  tick: null,
  lastMs: null,
  sketch: null,
  tickCounter: 0,
});

describe('one-sided readable tables', () => {
  it('refuses shapes whose layout could move: no size bound, or a TTL', () => {
    const base = { name: 't', dim: 4, optimizer: { kind: 'sum' as const }, oneSidedRead: true };
    const mem = { alloc: (n: number) => ({ bytes: new Uint8Array(n), release() {} }) };
    expect(() => new SparseTable(base, mem)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }),
    );
    expect(() => new SparseTable({ ...base, maxRows: 8, ttlMs: 1000 }, mem)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }),
    );
  });

  it('refuses readable tables off x86-64 with ERR_PS_NOT_SUPPORTED (JS seqlock order)', () => {
    const mem = { alloc: (n: number) => ({ bytes: new Uint8Array(n), release() {} }) };
    const cfg = { name: 't', dim: 4, optimizer: { kind: 'sum' as const }, maxRows: 8 };
    const arch = Object.getOwnPropertyDescriptor(process, 'arch') as PropertyDescriptor;
    Object.defineProperty(process, 'arch', { ...arch, value: 'arm64' });
    try {
      expect(() => new SparseTable({ ...cfg, oneSidedRead: true }, mem)).toThrow(
        expect.objectContaining({ code: 'ERR_PS_NOT_SUPPORTED' }),
      );
      new SparseTable(cfg, mem).close(); // other tables are not affected
    } finally {
      Object.defineProperty(process, 'arch', arch);
    }
    expect(process.arch).toBe(arch.value);
  });

  it('takes ONE region up front whose header the reader decodes', () => {
    const sizes: number[] = [];
    const mem = {
      alloc: (n: number) => {
        sizes.push(n);
        return { bytes: new Uint8Array(n), release() {} };
      },
    };
    const t = new SparseTable(
      {
        name: 't',
        dim: 8,
        optimizer: { kind: 'sum' },
        oneSidedRead: true,
        maxRows: 1000,
        rowDtype: 'f16',
      },
      mem,
    );
    const grads = new Float32Array(8 * 300).fill(1);
    const keys = k32Of(Array.from({ length: 300 }, (_, i) => i * 7919));
    t.push(keys, 300, grads, 0);
    expect(sizes).toHaveLength(1);
    const v = t.storeView;
    expect(v).not.toBeNull();
    const l = decodeStoreViewHeader((v as NonNullable<typeof v>).bytes, sizes[0] as number);
    expect(l).toMatchObject({ dim: 8, rowDtype: 'f16', rowBytes: 16 });
    expect(l.slotCount).toBeGreaterThanOrEqual(1000);
    expect(l.buckets).toBeGreaterThanOrEqual(1000 / 0.7);
    t.close();
  });

  it('zeroes the whole region: dirty row memory leaks nothing a peer can READ', () => {
    // Same salt for both tables, so the same pushes leave the same bytes: any byte that
    // differs is what the dirty memory last held (unused rows, key words, padding).
    const random = vi.spyOn(Math, 'random').mockReturnValue(0.25);
    try {
      const tableOn = (fill: number) => {
        const mem = {
          alloc: (n: number) => ({ bytes: new Uint8Array(n).fill(fill), release() {} }),
        };
        return new SparseTable(
          { name: 't', dim: 3, optimizer: { kind: 'sum' }, oneSidedRead: true, maxRows: 40 },
          mem,
        );
      };
      const clean = tableOn(0);
      const dirty = tableOn(0xab);
      const keys = k32Of([1, 2, 3, 99]);
      const grads = new Float32Array(3 * 4).fill(0.5);
      clean.push(keys, 4, grads, 0);
      dirty.push(keys, 4, grads, 0);
      const a = (clean.storeView as NonNullable<typeof clean.storeView>).bytes;
      const b = (dirty.storeView as NonNullable<typeof dirty.storeView>).bytes;
      expect(b.byteLength).toBe(a.byteLength);
      expect(b.indexOf(0xab)).toBe(a.indexOf(0xab));
      expect(Buffer.from(b).equals(Buffer.from(a))).toBe(true);
      clean.close();
      dirty.close();
    } finally {
      random.mockRestore();
    }
  });

  it('native updates bump a slot seq by two (odd while the row changes)', () => {
    const mem = { alloc: (n: number) => ({ bytes: new Uint8Array(n), release() {} }) };
    const t = new SparseTable(
      { name: 't', dim: 4, optimizer: { kind: 'sum' }, oneSidedRead: true, maxRows: 16 },
      mem,
    );
    expect(t.kernels).toBe('native');
    const k = k32Of([5]);
    const g = new Float32Array(4).fill(1);
    t.push(k, 1, g, 0); // admission (JS) + update (native)
    const v = t.storeView as NonNullable<typeof t.storeView>;
    const m = new Uint32Array(v.bytes.buffer, v.bytes.byteOffset + v.layout.metaOffset, 4);
    const after1 = m[0] as number;
    expect(after1 % 2).toBe(0);
    t.push(k, 1, g, 0); // a native update only
    expect(m[0]).toBe(after1 + 2);
    expect([m[1], m[2], m[3]]).toEqual([5, 2, 1]);
    t.close();
  });

  const workload = fc.record({
    dtype: fc.constantFrom<'f32' | 'f16'>('f32', 'f16'),
    kernels: fc.constantFrom<'native' | 'js'>('native', 'js'),
    budgeted: fc.boolean(),
    admission: fc.boolean(),
    init: fc.constantFrom<InitConfig>({ kind: 'zeros' }, { kind: 'uniform', seed: 7 }),
    dim: fc.integer({ min: 1, max: 24 }),
    batches: fc.array(fc.array(fc.integer({ min: 0, max: 200 }), { minLength: 1, maxLength: 40 }), {
      minLength: 1,
      maxLength: 12,
    }),
    reads: fc.array(fc.integer({ min: 0, max: 260 }), { minLength: 1, maxLength: 64 }),
    window: fc.constantFrom(1, 2, 8, 256),
    attempts: fc.constantFrom(1, 4),
  });

  it('reads exactly what pullInto returns (inserts, pushes, LRU evictions, absent keys), slot hints kept across batches', async () => {
    let evicted = 0;
    let fellBack = 0;
    let hits = 0;
    let stale = 0;
    await fc.assert(
      fc.asyncProperty(workload, async (w) => {
        const config: SparseTableConfig = {
          name: 't',
          dim: w.dim,
          optimizer: { kind: 'adagrad', lr: 0.1 },
          rowDtype: w.dtype,
          kernels: w.kernels,
          init: w.init,
          oneSidedRead: true,
          ...(w.admission ? { admission: { threshold: 2, width: 64 } } : {}),
          // A budget of a few dozen rows makes the 200-key space evict; maxRows drops instead.
          ...(w.budgeted ? { budgetBytes: 16 * (w.dim * 12 + 64) + 2048 } : { maxRows: 30 }),
        };
        let taken = 0;
        const t = new SparseTable(config, {
          alloc: (n) => {
            taken += n;
            return { bytes: new Uint8Array(n), release() {} };
          },
        });
        // One reader and its slot hints across the batches: evictions between reads leave
        // hints whose slots now hold other keys (or none).
        const cache = new StoreViewSlotCache(64);
        let reader: StoreViewReader | undefined;
        let read: ViewReadFn | undefined;
        for (const b of w.batches) {
          const grads = Float32Array.from(
            { length: b.length * w.dim },
            (_, i) => ((i % 7) - 3) / 4,
          );
          t.push(k32Of(b), b.length, grads, 0);
          expect(seqsEven(t)).toBe(true);
          if (w.budgeted) {
            expect(t.stats().bytes).toBeLessThanOrEqual(config.budgetBytes as number);
            expect(taken).toBeLessThanOrEqual(config.budgetBytes as number);
          }
          if (reader === undefined) ({ reader, read } = readerFor(t, 64, w.init, w.window, cache));
          const n = w.reads.length;
          const k = k32Of(w.reads);
          const want = new Float32Array(n * w.dim);
          t.pullInto(k, n, want, 0);
          const got = new Float32Array(n * w.dim).fill(Number.NaN);
          const left = await readStoreView(reader, k, n, got, read as ViewReadFn, w.attempts);
          // Nothing races here: a key falls back only when its probe chain outruns the
          // windows its attempts read (never when one window spans the whole index).
          if (w.window >= reader.layout.buckets) expect(left).toBe(0);
          expect(reader.count(ViewKeyStatus.DONE) + left).toBe(n);
          for (let i = 0; i < n; i++)
            if (reader.status[i] === ViewKeyStatus.FALLBACK)
              t.pullInto(k.subarray(2 * i, 2 * i + 2), 1, got.subarray(i * w.dim), 0);
          expect(bits(got)).toEqual(bits(want));
          fellBack += left;
        }
        evicted += t.stats().evictedLru;
        hits += cache.hits;
        stale += cache.stale;
        t.close();
      }),
      { numRuns: 80 },
    );
    // The workloads did exercise slot reuse (and reads past a short window fell back), and
    // hints both held and went stale.
    expect(evicted).toBeGreaterThan(0);
    expect(fellBack).toBeGreaterThan(0);
    expect(hits).toBeGreaterThan(0);
    expect(stale).toBeGreaterThan(0);
  });

  it('a restored table reads the same and bumps the generation', async () => {
    const mem = { alloc: (n: number) => ({ bytes: new Uint8Array(n), release() {} }) };
    const config: SparseTableConfig = {
      name: 't',
      dim: 3,
      optimizer: { kind: 'sum' },
      oneSidedRead: true,
      maxRows: 32,
    };
    const t = new SparseTable(config, mem);
    const v = t.storeView as NonNullable<typeof t.storeView>;
    const gen = () =>
      new Uint32Array(v.bytes.buffer, v.bytes.byteOffset, 32)[STORE_VIEW_HEADER.GENERATION / 4];
    expect(gen()).toBe(0);
    t.load(threeRows(Uint32Array.of(1, 0, 2, 0, 3, 1)));
    expect(gen()).toBe(2); // once before the slots are filled, once after
    expect(seqsEven(t)).toBe(true);
    const k = Uint32Array.of(1, 0, 3, 1, 4, 0);
    const want = new Float32Array(9);
    t.pullInto(k, 3, want, 0);
    const { reader, read } = readerFor(t, 4);
    const got = new Float32Array(9);
    expect(await readStoreView(reader, k, 3, got, read)).toBe(0);
    expect(Array.from(got)).toEqual(Array.from(want));
    expect(Array.from(got)).toEqual([1, 1, 1, 3, 3, 3, 0, 0, 0]);
    t.close();
  });

  it('a load publishes each slot once, with its restored row, in a new generation', () => {
    const mem = { alloc: (n: number) => ({ bytes: new Uint8Array(n), release() {} }) };
    const dim = 3;
    const t = new SparseTable(
      { name: 't', dim, optimizer: { kind: 'sum' }, oneSidedRead: true, maxRows: 32 },
      mem,
    );
    const v = t.storeView as NonNullable<typeof t.storeView>;
    const l = v.layout;
    const head = new Uint32Array(v.bytes.buffer, v.bytes.byteOffset, 32);
    const restored = new Map([
      [1, [1, 1, 1]],
      [2, [2, 2, 2]],
      [3, [3, 3, 3]],
    ]);
    // What a one-sided reader could accept at each publication (seq made even): the slot's
    // row in the view's bytes, and the generation it would compare its hint against.
    const seen: { key: number; row: number[]; gen: number }[] = [];
    const real = StoreViewWriter.end.bind(StoreViewWriter);
    const end = vi.spyOn(StoreViewWriter, 'end').mockImplementation((meta, i, lo, hi, live) => {
      const ci =
        (meta.byteOffset - v.bytes.byteOffset - l.metaOffset) /
        (l.chunkRows * STORE_VIEW.META_BYTES);
      const at = v.bytes.byteOffset + l.rowsOffset + ci * l.chunkStride + i * dim * 4;
      const row = Array.from(new Float32Array(v.bytes.buffer, at, dim));
      seen.push({ key: lo as number, row, gen: head[STORE_VIEW_HEADER.GENERATION / 4] as number });
      real(meta, i, lo, hi, live);
    });
    try {
      t.load(threeRows(Uint32Array.of(1, 0, 2, 0, 3, 0)));
    } finally {
      end.mockRestore();
    }
    expect(seen.map((s) => s.key).sort()).toEqual([1, 2, 3]);
    for (const s of seen) {
      expect(s.row).toEqual(restored.get(s.key));
      expect(s.gen).toBe(1);
    }
    expect(head[STORE_VIEW_HEADER.GENERATION / 4]).toBe(2);
    t.close();
  });

  it('a durable store restores a readable table: reads equal pullInto, generation bumped', async () => {
    const dir = tmpDir('ps-view-');
    const tables: SparseTableConfig[] = [
      {
        name: 't',
        dim: 5,
        optimizer: { kind: 'adagrad', lr: 0.1 },
        oneSidedRead: true,
        maxRows: 100,
      },
    ];
    const keys = BigUint64Array.from({ length: 60 }, (_, i) => BigInt(i * 977) + (1n << 40n));
    const grads = Float32Array.from({ length: 60 * 5 }, (_, i) => (i % 11) / 10);
    const a = await ParameterStore.open({ dir, tables, log: { policy: 'none' } });
    await a.push('t', keys, grads, { session: 's', seq: 1 });
    await a.snapshot();
    await a.push('t', keys.subarray(0, 30), grads.subarray(0, 150), { session: 's', seq: 2 });
    await a.close();
    const b = await ParameterStore.open({ dir, tables, log: { policy: 'none' } });
    const v = b.storeView('t');
    expect(v).not.toBeNull();
    const view = v as NonNullable<typeof v>;
    const head = new Uint32Array(view.bytes.buffer, view.bytes.byteOffset, 32);
    expect(head[STORE_VIEW_HEADER.GENERATION / 4]).toBe(2);
    const ask = BigUint64Array.from([...keys, 5n, 1n << 40n]);
    const want = new Float32Array(ask.length * 5);
    b.pullInto('t', ask, want);
    const layout = decodeStoreViewHeader(view.bytes, view.bytes.byteLength);
    const reader = new StoreViewReader(layout, {
      maxKeys: 64,
      init: initRowFn(resolveInit(undefined)),
    });
    const got = new Float32Array(ask.length * 5);
    const k32 = new Uint32Array(ask.buffer);
    expect(await readStoreView(reader, k32, ask.length, got, localViewRead(view.bytes))).toBe(0);
    expect(bits(got)).toEqual(bits(want));
    await b.close();
  });

  it('a header whose bytes are intact but region too short is refused', () => {
    const mem = { alloc: (n: number) => ({ bytes: new Uint8Array(n), release() {} }) };
    const t = new SparseTable(
      { name: 't', dim: 3, optimizer: { kind: 'sum' }, oneSidedRead: true, maxRows: 32 },
      mem,
    );
    const v = t.storeView as NonNullable<typeof t.storeView>;
    expect(() => decodeStoreViewHeader(v.bytes, v.bytes.byteLength - 1)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_FIELD', offset: STORE_VIEW_HEADER.TOTAL_BYTES }),
    );
    expect(STORE_VIEW.HEADER_BYTES).toBe(128);
    t.close();
  });
});

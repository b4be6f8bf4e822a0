import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ACCESS_POLICIES,
  AllocError,
  accessFlags,
  type Block,
  type RegisteredBuffer,
  RegistrationCache,
} from '../src/index.js';
import {
  PAGE_BYTES,
  SIZE_CLASSES,
  SMALL_MAX_BYTES,
  sizeClassIndex,
  slabPages,
} from '../src/internal/SizeClasses.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { KiB, MiB, setup } from './helpers.js';

const LIMIT = 6 * MiB;

type Op =
  | { t: 'alloc'; n: number; policy: number }
  | { t: 'release'; i: number }
  | { t: 'double'; i: number }
  | { t: 'trim' }
  | { t: 'reserve'; bytes: number; policy: number };

const size = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 1, max: SMALL_MAX_BYTES }) },
  { weight: 3, arbitrary: fc.integer({ min: SMALL_MAX_BYTES + 1, max: 1536 * KiB }) },
  { weight: 1, arbitrary: fc.integer({ min: 2 * MiB + 1, max: 3 * MiB }) },
);
const policy = fc.integer({ min: 0, max: 3 });
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 10, arbitrary: fc.record({ t: fc.constant('alloc' as const), n: size, policy }) },
  { weight: 6, arbitrary: fc.record({ t: fc.constant('release' as const), i: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('double' as const), i: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('trim' as const) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('reserve' as const),
      bytes: fc.integer({ min: 0, max: 3 * MiB }),
      policy,
    }),
  },
);

interface Live {
  block: Block;
  tag: number;
  length: number;
  capacity: number;
}

/** Every byte of a block carries its tag: a corrupted byte shows another block wrote it. */
function fill(l: Live): void {
  l.block.bytes.fill(l.tag);
}

function intact(l: Live): boolean {
  // A plain loop: `every` with a closure per byte made this test most of its run time.
  const bytes = l.block.bytes;
  const tag = l.tag;
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== tag) return false;
  return true;
}

describe('allocator properties', () => {
  it('live blocks never overlap, lie in registered ranges with the right keys, stats and limits hold', () => {
    let limitHits = 0;
    let dedicatedAllocs = 0;
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60, size: 'max' }), fc.boolean(), (ops, debug) => {
        const { a, reg } = setup({
          arenaBytes: 1 * MiB,
          maxArenaBytes: 2 * MiB,
          maxRegisteredBytes: LIMIT,
          retainEmptyArenas: 1,
          debug,
        });
        const live: Live[] = [];
        const released: Block[] = [];
        let tag = 1;
        for (const o of ops) {
          if (o.t === 'alloc') {
            const access = ACCESS_POLICIES[o.policy] ?? 'local';
            let block: Block | undefined;
            const before = a.stats();
            try {
              block = a.alloc(o.n, access);
            } catch (err) {
              // Only the limit may refuse, and only when what the request needs registered
              // (a slab, whole pages, or a dedicated region) does not fit next to what is
              // left registered after reclaiming unused arenas.
              expect((err as AllocError).code).toBe('ERR_ALLOC_LIMIT');
              const after = a.stats();
              expect(after.registeredBytes + registrationNeeded(o.n)).toBeGreaterThan(LIMIT);
              expect(after.liveBlocks).toBe(before.liveBlocks);
              expect(after.inUseBytes).toBe(before.inUseBytes);
              limitHits++;
              continue;
            }
            if (o.n > 2 * MiB) dedicatedAllocs++;
            const l = { block, tag: (tag++ % 250) + 1, length: o.n, capacity: block.capacity };
            fill(l);
            live.push(l);
          } else if (o.t === 'release' && live.length > 0) {
            const [l] = live.splice(o.i % live.length, 1) as [Live];
            expect(intact(l)).toBe(true);
            l.block.release();
            released.push(l.block);
          } else if (o.t === 'double' && released.length > 0) {
            const b = released[o.i % released.length] as Block;
            const before = a.stats();
            expect(() => b.release()).toThrow(AllocError);
            expect(a.stats()).toEqual(before);
          } else if (o.t === 'trim') {
            a.trim();
          } else if (o.t === 'reserve') {
            try {
              a.reserve(o.bytes, ACCESS_POLICIES[o.policy] ?? 'local');
            } catch (err) {
              expect((err as AllocError).code).toBe('ERR_ALLOC_LIMIT');
            }
          }
          check(a, reg, live);
        }
        for (const l of live) {
          expect(intact(l)).toBe(true);
          l.block.release();
        }
        a.trim();
        expect(a.stats()).toMatchObject({ liveBlocks: 0, inUseBytes: 0, registeredBytes: 0 });
        expect(reg.live.size).toBe(0);
        a.close();
        expect(reg.misuse).toEqual([]);
      }),
      { numRuns: 50 },
    );
    // The runs did reach the limit and the dedicated path, not only the easy cases.
    expect(limitHits).toBeGreaterThan(0);
    expect(dedicatedAllocs).toBeGreaterThan(0);
  }, 90_000); // 50 runs of up to 60 operations on MiB blocks: seconds alone, far more on a loaded machine

  it('registration cache: limits hold, pinned registrations stay registered, books match the registrar', () => {
    type CacheOp =
      | { t: 'acquire'; buf: number; policy: number; view: boolean }
      | { t: 'release'; i: number }
      | { t: 'invalidate'; buf: number }
      | { t: 'trim' };
    const cacheOp: fc.Arbitrary<CacheOp> = fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          t: fc.constant('acquire' as const),
          buf: fc.nat({ max: 9 }),
          policy: fc.integer({ min: 0, max: 1 }),
          view: fc.boolean(),
        }),
      },
      { weight: 5, arbitrary: fc.record({ t: fc.constant('release' as const), i: fc.nat() }) },
      {
        weight: 1,
        arbitrary: fc.record({ t: fc.constant('invalidate' as const), buf: fc.nat({ max: 9 }) }),
      },
      { weight: 1, arbitrary: fc.record({ t: fc.constant('trim' as const) }) },
    );
    fc.assert(
      fc.property(fc.array(cacheOp, { maxLength: 80, size: 'max' }), (ops) => {
        const reg = new FakeRegistrar();
        const maxBytes = 40 * KiB;
        const maxEntries = 5;
        const cache = new RegistrationCache({ registrar: reg, maxBytes, maxEntries });
        const buffers = Array.from({ length: 10 }, (_, i) => new ArrayBuffer((i + 1) * 1024));
        const held: RegisteredBuffer[] = [];
        for (const o of ops) {
          if (o.t === 'acquire') {
            const buf = buffers[o.buf] as ArrayBuffer;
            const target = o.view ? new Uint8Array(buf, 16, 64) : buf;
            try {
              held.push(cache.acquire(target, ACCESS_POLICIES[o.policy] ?? 'local'));
            } catch (err) {
              expect((err as AllocError).code).toBe('ERR_ALLOC_LIMIT');
              expect((err as AllocError).retryable).toBe(true);
            }
          } else if (o.t === 'release' && held.length > 0) {
            held.splice(o.i % held.length, 1)[0]?.release();
          } else if (o.t === 'invalidate') {
            cache.invalidate(buffers[o.buf] as ArrayBuffer);
          } else if (o.t === 'trim') {
            cache.trim();
          }
          const s = cache.stats();
          expect(s.registeredBytes).toBeLessThanOrEqual(maxBytes);
          expect(s.entries).toBeLessThanOrEqual(maxEntries);
          expect(s.entries).toBe(reg.live.size);
          expect(s.registeredBytes).toBe(reg.liveBytes);
          expect(s.registrations - s.deregistrations).toBe(reg.live.size);
          for (const h of held) {
            const region = reg.regionByKey(h.lkey);
            expect(region).toBeDefined();
            expect(h.addr).toBeGreaterThanOrEqual(region?.addr ?? Number.NaN);
            expect(h.addr + h.length).toBeLessThanOrEqual(
              (region?.addr ?? 0) + (region?.length ?? 0),
            );
            expect(h.rkey).toBe(region?.rkey);
            expect(region?.access).toBe(accessFlags(h.access));
            expect(h.bytes.buffer).toBe(region?.bytes.buffer);
          }
        }
        for (const h of held) h.release();
        cache.close();
        expect(cache.state).toBe('closed');
        expect(reg.live.size).toBe(0);
        expect(reg.misuse).toEqual([]);
      }),
      { numRuns: 100 },
    );
  });
});

function registrationNeeded(n: number): number {
  if (n <= SMALL_MAX_BYTES)
    return slabPages(SIZE_CLASSES[sizeClassIndex(n)] as number) * PAGE_BYTES;
  if (n <= 2 * MiB) return Math.ceil(n / PAGE_BYTES) * PAGE_BYTES;
  return n;
}

function check(a: ReturnType<typeof setup>['a'], reg: FakeRegistrar, live: Live[]): void {
  const s = a.stats();
  // Stats agree with what the test holds and with what the registrar has registered.
  expect(s.liveBlocks).toBe(live.length);
  expect(s.inUseBytes).toBe(live.reduce((n, l) => n + l.length, 0));
  expect(s.allocatedBytes).toBe(live.reduce((n, l) => n + l.capacity, 0));
  expect(s.registeredBytes).toBe(reg.liveBytes);
  expect(s.registeredBytes).toBe(s.arenaBytes + s.dedicatedBytes);
  expect(s.registrations - s.deregistrations).toBe(reg.live.size);
  expect(s.registeredBytes).toBeLessThanOrEqual(LIMIT);
  const small = live.filter((l) => l.length <= SMALL_MAX_BYTES).length;
  expect(s.classes.reduce((n, c) => n + c.liveBlocks, 0)).toBe(small);
  expect(s.arenas.reduce((n, x) => n + x.liveBlocks, 0)).toBe(live.length - s.dedicated.liveBlocks);
  for (const x of s.arenas) {
    // Free runs (boundary tags) and used-page counts describe the same arena.
    expect(x.usedBytes + x.freeBytes).toBe(x.bytes);
    expect(x.largestFreeRun).toBeLessThanOrEqual(x.freeBytes);
  }
  // No two live blocks overlap; each lies inside one registered region with its keys/access.
  const sorted = [...live].sort((x, y) => x.block.addr - y.block.addr);
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1] as Live;
    expect(prev.block.addr + prev.capacity).toBeLessThanOrEqual((sorted[i] as Live).block.addr);
  }
  for (const l of live) {
    const b = l.block;
    const region = reg.regionOf(b.addr, b.capacity);
    expect(region).toBeDefined();
    expect(b.lkey).toBe(region?.lkey);
    expect(b.rkey).toBe(region?.rkey);
    expect(region?.access).toBe(accessFlags(b.access));
    expect(b.bytes.buffer).toBe(region?.bytes.buffer);
    expect(b.bytes.byteOffset - (region?.bytes.byteOffset ?? 0)).toBe(b.addr - (region?.addr ?? 0));
    expect(b.bytes[0]).toBe(l.tag);
    expect(b.bytes[b.length - 1]).toBe(l.tag);
  }
  expect(a.leakReport().blocks.map((x) => x.addr)).toEqual(sorted.map((l) => l.block.addr));
}

import { describe, expect, it } from 'vitest';
import {
  AllocUseAfterReleaseError,
  type Block,
  RegisteredAllocator,
  type RegisteredAllocatorOptions,
} from '../src/index.js';
import { SMALL_MAX_BYTES } from '../src/internal/SizeClasses.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { expectCode, KiB, MiB, setup } from './helpers.js';

describe('safety', () => {
  it('a second release throws ERR_ALLOC_DOUBLE_RELEASE and changes nothing', () => {
    const { a } = setup();
    for (const n of [10, 100 * KiB]) {
      const b = a.alloc(n);
      const other = a.alloc(n);
      b.release();
      const before = a.stats();
      expectCode(() => b.release(), 'ERR_ALLOC_DOUBLE_RELEASE');
      expectCode(() => a.release(b), 'ERR_ALLOC_DOUBLE_RELEASE');
      expect(a.stats()).toEqual(before);
      expect(other.released).toBe(false);
      other.release();
    }
  });

  it('a released block is never handed out again: the memory goes to a new Block object', () => {
    const { a } = setup();
    for (const n of [48, 100 * KiB]) {
      const b = a.alloc(n);
      const addr = b.addr;
      b.release();
      const c = a.alloc(n);
      expect(c.addr).toBe(addr); // the same memory...
      expect(c).not.toBe(b); // ...behind a new handle
      // The stale handle cannot release (or reach) the new owner's block.
      expectCode(() => b.release(), 'ERR_ALLOC_DOUBLE_RELEASE');
      expectCode(() => a.release(b), 'ERR_ALLOC_DOUBLE_RELEASE');
      expectCode(() => b.bytes, 'ERR_ALLOC_USE_AFTER_RELEASE');
      expect(c.released).toBe(false);
      expect(c.bytes.length).toBe(n);
      c.release();
    }
  });

  it('every accessor of a released block throws ERR_ALLOC_USE_AFTER_RELEASE', () => {
    const { a } = setup();
    const b = a.alloc(300);
    const s = b.slice(0, 10);
    b.release();
    const uses: Array<() => unknown> = [
      () => b.bytes,
      () => b.addr,
      () => b.lkey,
      () => b.rkey,
      () => b.sge(),
      () => b.slice(0, 1),
      () => s.bytes,
      () => s.addr,
      () => s.lkey,
      () => s.sge(),
    ];
    for (const use of uses) expectCode(use, 'ERR_ALLOC_USE_AFTER_RELEASE');
    // What is not memory stays readable.
    expect({
      length: b.length,
      capacity: b.capacity,
      state: b.state,
      released: b.released,
    }).toEqual({
      length: 300,
      capacity: 320,
      state: 'released',
      released: true,
    });
  });

  it('releasing a block of another allocator, or a look-alike, throws ERR_ALLOC_FOREIGN_BLOCK', () => {
    const { a } = setup();
    const { a: other } = setup();
    const theirs = other.alloc(100);
    expectCode(() => a.release(theirs), 'ERR_ALLOC_FOREIGN_BLOCK');
    expect(theirs.released).toBe(false);
    expect(a.owns(theirs)).toBe(false);
    expect(other.owns(theirs)).toBe(true);
    const fake = { addr: 1, length: 1, lkey: 1, release() {} } as unknown as Block;
    expectCode(() => a.release(fake), 'ERR_ALLOC_FOREIGN_BLOCK');
    theirs.release();
  });

  it('rejects bad sizes, ranges, policies and options with ERR_ALLOC_INVALID_ARG', () => {
    const { a } = setup();
    for (const bad of [
      0,
      -1,
      1.5,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      '10' as unknown as number,
    ]) {
      expectCode(() => a.alloc(bad), 'ERR_ALLOC_INVALID_ARG');
    }
    expectCode(() => a.alloc(10, 'public' as never), 'ERR_ALLOC_INVALID_ARG');
    const b = a.alloc(100);
    for (const [o, l] of [
      [-1, 1],
      [0, 101],
      [100, 1],
      [1.5, 1],
      [0, -1],
    ] as const) {
      expectCode(() => b.slice(o, l), 'ERR_ALLOC_INVALID_ARG');
      expectCode(() => b.sge(o, l), 'ERR_ALLOC_INVALID_ARG');
    }
    expectCode(() => b.slice(10, 20).slice(15, 10), 'ERR_ALLOC_INVALID_ARG');
    expectCode(() => b.slice(10, 20).sge(0, 21), 'ERR_ALLOC_INVALID_ARG');
    const reg = new FakeRegistrar();
    const bads: Array<Partial<RegisteredAllocatorOptions>> = [
      { registrar: {} as never },
      { registrar: reg, arenaBytes: 1000 },
      { registrar: reg, arenaBytes: 4 * MiB, maxArenaBytes: 1 * MiB },
      { registrar: reg, maxRegisteredBytes: 0 },
      { registrar: reg, retainEmptyArenas: -1 },
      { registrar: reg, defaultAccess: 'everyone' as never },
      { registrar: reg, cache: { maxEntries: 0 } },
    ];
    for (const o of bads) {
      expectCode(
        () => new RegisteredAllocator(o as RegisteredAllocatorOptions),
        'ERR_ALLOC_INVALID_ARG',
      );
    }
    // User mistakes are thrown before any work and do not count as failed allocations.
    expect(a.stats()).toMatchObject({ failedAllocs: 0, allocs: 1, liveBlocks: 1 });
  });

  it('lists live blocks in the leak report; in debug mode with where they were allocated', () => {
    const { a } = setup({ debug: true });
    function leakyHelper(): Block {
      return a.alloc(SMALL_MAX_BYTES * 2);
    }
    const kept = [a.alloc(10), leakyHelper(), a.alloc(5)];
    a.alloc(20).release();
    const report = a.leakReport();
    expect(report.liveBlocks).toBe(3);
    expect(report.inUseBytes).toBe(10 + SMALL_MAX_BYTES * 2 + 5);
    expect(report.blocks.map((b) => b.length).sort((x, y) => x - y)).toEqual([
      5,
      10,
      SMALL_MAX_BYTES * 2,
    ]);
    const large = report.blocks.find((b) => b.kind === 'large');
    expect(large?.allocatedAt).toContain('leakyHelper');
    expect(large?.allocatedAt).not.toMatch(/RegisteredAllocator\.alloc/);
    for (const b of kept) b.release();
    expect(a.leakReport()).toEqual({ liveBlocks: 0, inUseBytes: 0, blocks: [] });
    // Without debug: the same report, without stacks.
    const { a: plain } = setup();
    plain.alloc(10);
    expect(plain.leakReport().blocks).toMatchObject([
      { length: 10, kind: 'small', allocatedAt: undefined },
    ]);
  });

  it('debug: a write through a view kept past release is detected when the memory is reused', () => {
    for (const n of [200, 100 * KiB]) {
      const { a } = setup({ debug: true });
      function culprit(): Block {
        return a.alloc(n);
      }
      const b = culprit();
      const stale = b.bytes;
      b.release();
      stale[3] = 1; // use after release, invisible to the Block itself
      let err: unknown;
      try {
        a.alloc(n);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(AllocUseAfterReleaseError);
      const uar = err as AllocUseAfterReleaseError;
      expect(uar.code).toBe('ERR_ALLOC_USE_AFTER_RELEASE');
      expect(uar.allocatedAt).toContain('culprit');
      expect(uar.releasedAt).toBeDefined();
      // The memory was re-poisoned and stays free: the next alloc succeeds.
      expect(a.alloc(n).length).toBe(n);
      expect(a.stats()).toMatchObject({ liveBlocks: 1, failedAllocs: 1 });
    }
  });

  it('debug: double release reports both stacks', () => {
    const { a } = setup({ debug: true });
    const b = a.alloc(10);
    b.release();
    const err = expectCode(() => b.release(), 'ERR_ALLOC_DOUBLE_RELEASE');
    expect(err.message).toContain('allocated at');
    expect(err.message).toContain('released at');
  });
});

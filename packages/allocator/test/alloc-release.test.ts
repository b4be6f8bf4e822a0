import { describe, expect, it } from 'vitest';
import { Access, Block, BlockSlice, RegisteredAllocator } from '../src/index.js';
import { PAGE_BYTES, SMALL_MAX_BYTES } from '../src/internal/SizeClasses.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { KiB, MiB, setup } from './helpers.js';

describe('alloc and release', () => {
  it('hands out a view of registered memory with the arena keys and address (zero copy)', () => {
    const { a, reg } = setup();
    const b = a.alloc(100);
    expect(b).toBeInstanceOf(Block);
    expect(b.length).toBe(100);
    expect(b.capacity).toBe(112);
    expect(b.bytes.length).toBe(100);
    const region = reg.regionOf(b.addr, b.length);
    expect(region).toBeDefined();
    expect(b.lkey).toBe(region?.lkey);
    expect(b.rkey).toBe(region?.rkey);
    // The view is the registered memory itself, at the block's address.
    expect(b.bytes.buffer).toBe(region?.bytes.buffer);
    expect(b.bytes.byteOffset - (region?.bytes.byteOffset ?? 0)).toBe(b.addr - (region?.addr ?? 0));
    b.bytes.set([1, 2, 3]);
    const at = b.addr - (region?.addr ?? 0);
    expect([...(region?.bytes.subarray(at, at + 3) ?? [])]).toEqual([1, 2, 3]);
    expect(b.bytes).toBe(b.bytes); // one view per block, not one per access
  });

  it('registers one arena for many small blocks and reuses released slots', () => {
    const { a, reg } = setup();
    const blocks = Array.from({ length: 1000 }, (_, i) => a.alloc(16 + (i % 200)));
    expect(reg.count('allocate')).toBe(1);
    const addr = blocks[10]?.addr;
    blocks[10]?.release();
    const again = a.alloc(16 + (10 % 200));
    expect(again.addr).toBe(addr);
    expect(reg.count('allocate')).toBe(1);
    for (const b of blocks) if (!b.released) b.release();
    again.release();
    expect(a.stats()).toMatchObject({ liveBlocks: 0, inUseBytes: 0, allocatedBytes: 0 });
  });

  it('serves large blocks as page-aligned whole pages, best fit, merging freed neighbours', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB });
    const arena = () => a.stats().arenas[0];
    const x = a.alloc(100 * KiB);
    const y = a.alloc(200 * KiB);
    const z = a.alloc(100 * KiB);
    const region = reg.regionOf(x.addr, x.length);
    for (const b of [x, y, z]) {
      expect((b.addr - (region?.addr ?? 0)) % PAGE_BYTES).toBe(0);
      expect(b.capacity % PAGE_BYTES).toBe(0);
    }
    expect(y.addr).toBe(x.addr + x.capacity);
    const xAddr = x.addr;
    x.release();
    z.release();
    // Best fit: a 90 KiB request takes the 100 KiB hole left by x, not the larger tail.
    const w = a.alloc(90 * KiB);
    expect(w.addr).toBe(xAddr);
    w.release();
    y.release();
    // Everything merged back into one run covering the arena.
    expect(arena()).toMatchObject({ usedBytes: 0, freeRuns: 1, largestFreeRun: 1 * MiB });
    expect(a.alloc(1 * MiB).addr).toBe(region?.addr);
  });

  it('merges freed runs with the left, the right, both or neither neighbour, in any order', () => {
    const { a } = setup({ arenaBytes: 1 * MiB });
    const arena = () => a.stats().arenas[0];
    const orders = [
      [0, 1, 2, 3],
      [3, 2, 1, 0],
      [1, 3, 0, 2],
      [2, 0, 3, 1],
      [1, 2, 0, 3],
    ];
    for (const order of orders) {
      // Four adjacent blocks and the tail of the arena; release them in `order`.
      const blocks = [40, 100, 64, 300].map((k) => a.alloc(k * KiB));
      for (let i = 0; i < order.length; i++) {
        (blocks[order[i] as number] as Block).release();
        const s = arena();
        expect(s?.usedBytes).toBe(blocks.reduce((n, b) => n + (b.released ? 0 : b.capacity), 0));
        expect((s?.usedBytes ?? 0) + (s?.freeBytes ?? 0)).toBe(1 * MiB);
      }
      expect(arena()).toMatchObject({ usedBytes: 0, freeRuns: 1, largestFreeRun: 1 * MiB });
    }
  });

  it('puts blocks above maxArenaBytes in dedicated registrations, deregistered on release', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB, maxArenaBytes: 2 * MiB });
    const big = a.alloc(3 * MiB + 5);
    expect(big.capacity).toBe(3 * MiB + 5);
    const region = reg.regionOf(big.addr, big.length);
    expect(region?.length).toBe(3 * MiB + 5);
    expect(big.addr).toBe(region?.addr);
    expect(a.stats()).toMatchObject({ dedicatedBytes: 3 * MiB + 5, dedicated: { liveBlocks: 1 } });
    const live = reg.live.size;
    big.release();
    expect(reg.live.size).toBe(live - 1);
    expect(a.stats()).toMatchObject({ dedicatedBytes: 0, registeredBytes: 0 });
  });

  it('a block larger than arenaBytes but within maxArenaBytes gets an arena of its size', () => {
    const { a } = setup({ arenaBytes: 1 * MiB, maxArenaBytes: 8 * MiB });
    const b = a.alloc(3 * MiB);
    expect(a.stats().arenas.map((s) => s.bytes)).toEqual([3 * MiB]);
    b.release();
    // The arena stays (retained) and serves other blocks later without registering.
    expect(a.alloc(2 * MiB).capacity).toBe(2 * MiB);
    expect(a.stats().registrations).toBe(1);
  });

  it('slices and sges are sub-ranges of the same memory, never copies', () => {
    const { a } = setup();
    const b = a.alloc(SMALL_MAX_BYTES + 1000);
    const s = b.slice(100, 50);
    expect(s).toBeInstanceOf(BlockSlice);
    expect(s).toMatchObject({
      addr: b.addr + 100,
      length: 50,
      lkey: b.lkey,
      rkey: b.rkey,
      offset: 100,
    });
    s.bytes.fill(7);
    expect(b.bytes[99]).toBe(0);
    expect(b.bytes[100]).toBe(7);
    expect(b.bytes[149]).toBe(7);
    expect(b.bytes[150]).toBe(0);
    expect(s.bytes.buffer).toBe(b.bytes.buffer);
    const inner = s.slice(10, 5);
    expect(inner).toMatchObject({ addr: b.addr + 110, length: 5 });
    expect(s.sge()).toEqual({ addr: b.addr + 100, length: 50, lkey: b.lkey });
    expect(s.sge(10, 5)).toEqual({ addr: b.addr + 110, length: 5, lkey: b.lkey });
    expect(b.sge()).toEqual({ addr: b.addr, length: b.length, lkey: b.lkey });
    expect(b.sge(8)).toEqual({ addr: b.addr + 8, length: b.length - 8, lkey: b.lkey });
    expect(b.sge(8, 16)).toEqual({ addr: b.addr + 8, length: 16, lkey: b.lkey });
    expect(b.slice(b.length)).toMatchObject({ length: 0 });
  });

  it('keeps access policies in separate arenas registered with their own flags', () => {
    const { a, reg } = setup();
    const local = a.alloc(64);
    const rr = a.alloc(64, 'remote-read');
    const rw = a.alloc(64, 'remote-write');
    const rrw = a.alloc(100 * KiB, 'remote-read-write');
    const flagsOf = (b: Block) => reg.regionOf(b.addr, b.length)?.access;
    expect(flagsOf(local)).toBe(Access.LocalWrite);
    expect(flagsOf(rr)).toBe(Access.LocalWrite | Access.RemoteRead);
    expect(flagsOf(rw)).toBe(Access.LocalWrite | Access.RemoteWrite);
    expect(flagsOf(rrw)).toBe(Access.LocalWrite | Access.RemoteRead | Access.RemoteWrite);
    expect(new Set([local, rr, rw, rrw].map((b) => b.lkey)).size).toBe(4);
    expect([local.access, rr.access, rw.access, rrw.access]).toEqual([
      'local',
      'remote-read',
      'remote-write',
      'remote-read-write',
    ]);
    expect(
      a
        .stats()
        .arenas.map((s) => s.access)
        .sort(),
    ).toEqual(['local', 'remote-read', 'remote-read-write', 'remote-write']);
  });

  it('uses defaultAccess when alloc names no policy', () => {
    const { a } = setup({ defaultAccess: 'remote-write' });
    expect(a.alloc(10).access).toBe('remote-write');
    expect(a.alloc(10, 'local').access).toBe('local');
  });

  it('registers memory it creates when the registrar has no allocate()', () => {
    const reg = new FakeRegistrar();
    const a = new RegisteredAllocator({ registrar: reg.withoutAllocate(), arenaBytes: 1 * MiB });
    const b = a.alloc(5000);
    expect(reg.count('allocate')).toBe(0);
    expect(reg.calls).toEqual([{ op: 'register', length: 1 * MiB, access: Access.LocalWrite }]);
    expect(reg.regionOf(b.addr, b.length)?.lkey).toBe(b.lkey);
  });

  it('returns empty slabs to the arena but keeps one per class against thrashing', () => {
    const { a } = setup();
    const cls = () => a.stats().classes.find((c) => c.size === 64);
    const first = Array.from({ length: 2000 }, () => a.alloc(64)); // > 1 slab of 1024
    expect(cls()?.slabs).toBe(2);
    for (const b of first) b.release();
    expect(cls()).toMatchObject({ slabs: 1, liveBlocks: 0 });
    // Alloc/release of one block does not carve a new slab each time.
    const used = a.stats().arenas[0]?.usedBytes;
    for (let i = 0; i < 10; i++) a.alloc(64).release();
    expect(a.stats().arenas[0]?.usedBytes).toBe(used);
    expect(a.trim()).toBeGreaterThan(0);
    expect(cls()?.slabs).toBe(0);
  });
});

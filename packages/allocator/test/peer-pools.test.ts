// allocator.forPeer(): pools whose arenas hold one peer's memory only, under the owner's
// limit, closed with their owner and listed in its leak report.
import { describe, expect, it } from 'vitest';
import { type AllocLimitError, type Block, RegisteredAllocator } from '../src/index.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { expectCode, KiB, MiB, mixSize, rng, setup } from './helpers.js';

/** The registered region (arena) a block lies in, by address. */
function regionOf(reg: FakeRegistrar, b: Block) {
  for (const r of reg.live.values()) {
    if (b.addr >= r.addr && b.addr + b.length <= r.addr + r.bytes.byteLength) return r;
  }
  return undefined;
}

describe('allocator.forPeer()', () => {
  it('gives every pool arenas of its own: a remote key never reaches another pool or the owner', () => {
    const { a, reg } = setup();
    const p1 = a.forPeer({ label: 'peer-1' });
    const p2 = a.forPeer({ label: 'peer-2' });
    const shared = a.alloc(4 * KiB, 'remote-read');
    const b1 = p1.alloc(4 * KiB, 'remote-read');
    const b2 = p2.alloc(4 * KiB, 'remote-read');
    const regions = [shared, b1, b2].map((b) => regionOf(reg, b));
    expect(new Set(regions).size).toBe(3);
    expect(new Set([shared.rkey, b1.rkey, b2.rkey]).size).toBe(3);
    for (const [i, r] of regions.entries()) expect(r?.rkey).toBe([shared, b1, b2][i]?.rkey);
    // blocks of one pool share that pool's arena (meant for the same peer)
    const b1b = p1.alloc(100, 'remote-read');
    expect(regionOf(reg, b1b)).toBe(regions[1]);
    expect(p1.label).toBe('peer-1');
    expect(a.label).toBeUndefined();
    // a pool's blocks are its own
    expect(p1.owns(b1)).toBe(true);
    expect(a.owns(b1)).toBe(false);
    expectCode(() => a.release(b1), 'ERR_ALLOC_FOREIGN_BLOCK');
    expectCode(() => p2.release(b1), 'ERR_ALLOC_FOREIGN_BLOCK');
    for (const b of [shared, b1, b1b, b2]) b.release();
  });

  it('inherits the owner’s options and may take a smaller arena, limit and default policy', () => {
    const { a } = setup({ arenaBytes: 2 * MiB, defaultAccess: 'remote-read' });
    const same = a.forPeer();
    const small = a.forPeer({ arenaBytes: 256 * KiB, defaultAccess: 'local' });
    const s1 = same.alloc(64);
    const s2 = small.alloc(64);
    expect(s1.access).toBe('remote-read');
    expect(s2.access).toBe('local');
    expect(same.stats().arenas[0]?.bytes).toBe(2 * MiB);
    expect(small.stats().arenas[0]?.bytes).toBe(256 * KiB);
    s1.release();
    s2.release();
    for (const bad of [{ label: 5 }, { arenaBytes: -1 }, { defaultAccess: 'everything' }, 'x']) {
      expectCode(() => a.forPeer(bad as never), 'ERR_ALLOC_INVALID_ARG');
    }
    expect(a.stats().peerPools.pools).toBe(2);
  });

  it('counts the owner and its pools against one maxRegisteredBytes, giving back empty arenas', () => {
    const { a, reg } = setup({ maxRegisteredBytes: 4 * MiB, retainEmptyArenas: 4 });
    const p1 = a.forPeer();
    const p2 = a.forPeer();
    const held = [p1.alloc(1 * MiB), p1.alloc(1 * MiB), a.alloc(1 * MiB)];
    const last = p2.alloc(1 * MiB);
    expect(reg.liveBytes).toBe(4 * MiB);
    const err = expectCode(() => p2.alloc(1 * MiB), 'ERR_ALLOC_LIMIT') as AllocLimitError;
    expect(err.limit).toBe(4 * MiB);
    expect(err.retryable).toBe(true);
    expect(a.stats().peerPools).toEqual({
      pools: 2,
      registeredBytes: 3 * MiB,
      inUseBytes: 3 * MiB,
      liveBlocks: 3,
    });
    // p1's arenas go empty (and are retained): p2 takes one of them back from p1
    for (const b of held.slice(0, 2)) b.release();
    expect(p1.registeredBytes).toBe(2 * MiB);
    const next = p2.alloc(1 * MiB);
    expect(reg.liveBytes).toBe(4 * MiB);
    expect(p1.registeredBytes).toBe(1 * MiB);
    // a pool's own limit, below the owner's
    const p3 = a.forPeer({ maxRegisteredBytes: 1 * MiB });
    p1.trim();
    const x = p3.alloc(512 * KiB);
    expectCode(() => p3.alloc(1 * MiB), 'ERR_ALLOC_LIMIT');
    for (const b of [held[2] as Block, last, next, x]) b.release();
  });

  it('closes with its owner: no new blocks, arenas deregistered as the live ones are released', () => {
    const { a, reg } = setup();
    const pool = a.forPeer({ label: 'p' });
    const kept = pool.alloc(10_000, 'remote-read');
    pool.alloc(64).release();
    a.close();
    expect(a.state).toBe('closed');
    expect(pool.state).toBe('closing');
    expectCode(() => pool.alloc(64), 'ERR_ALLOC_CLOSED');
    expectCode(() => a.forPeer(), 'ERR_ALLOC_CLOSED');
    // the owner's leak report still names the pool's live block
    expect(a.leakReport().blocks).toEqual([
      expect.objectContaining({ addr: kept.addr, length: 10_000, pool: 'p' }),
    ]);
    kept.bytes.fill(1); // still usable: a posted work request may be using it
    kept.release();
    expect(pool.state).toBe('closed');
    expect(reg.live.size).toBe(0);
    expect(a.leakReport().blocks).toEqual([]);
    expect(a.stats().peerPools.pools).toBe(0);
  });

  it('is destroyed with its owner: live blocks revoked, everything deregistered', () => {
    const { a, reg } = setup();
    const pool = a.forPeer();
    const b = pool.alloc(64, 'remote-read');
    a.destroy();
    expect(pool.state).toBe('closed');
    expectCode(() => b.bytes, 'ERR_ALLOC_CLOSED');
    b.release(); // no-op on a revoked block
    expect(reg.live.size).toBe(0);
  });

  it('a pool closed on its own leaves the family; the owner goes on', () => {
    const { a, reg } = setup();
    const pool = a.forPeer({ label: 'gone' });
    const b = pool.alloc(64);
    expect(a.leakReport().blocks).toEqual([expect.objectContaining({ pool: 'gone' })]);
    pool.close();
    b.release();
    expect(pool.state).toBe('closed');
    expect(a.stats().peerPools.pools).toBe(0);
    const c = a.alloc(64);
    expect(a.leakReport().blocks).toEqual([expect.objectContaining({ pool: undefined })]);
    c.release();
    a.close();
    expect(reg.live.size).toBe(0);
  });

  it('follows the registrar: a closed PD revokes the pool’s blocks too', () => {
    const reg = new FakeRegistrar();
    let closed = false;
    const a = new RegisteredAllocator({
      arenaBytes: 1 * MiB,
      registrar: {
        allocate: (n, f) => reg.allocate(n, f),
        register: (b, f) => reg.register(b, f),
        deregister: (r) => reg.deregister(r as never),
        get closed() {
          return closed;
        },
      },
    });
    const pool = a.forPeer();
    const b = pool.alloc(64);
    closed = true;
    expectCode(() => b.addr, 'ERR_ALLOC_CLOSED');
    expect(pool.state).toBe('closed');
    expect(a.state).toBe('closed');
    expect(a.leakReport().blocks).toEqual([]);
  });
});

describe('allocator.forPeer() under a random mix', () => {
  it('keeps every pool in arenas of its own and the family under one limit', () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const random = rng(seed);
      const { a, reg } = setup({ maxRegisteredBytes: 12 * MiB, retainEmptyArenas: 1 });
      const owners: RegisteredAllocator[] = [a, a.forPeer(), a.forPeer(), a.forPeer()];
      const live: { owner: RegisteredAllocator; block: Block }[] = [];
      const policies = ['local', 'remote-read', 'remote-write'] as const;
      let limited = 0;
      for (let step = 0; step < 600; step++) {
        if (live.length > 0 && random() < 0.45) {
          const [x] = live.splice(Math.floor(random() * live.length), 1);
          x?.block.release();
        } else {
          const owner = owners[Math.floor(random() * owners.length)] as RegisteredAllocator;
          const n = Math.min(mixSize(random), 3 * MiB);
          const access = policies[Math.floor(random() * 3)];
          try {
            live.push({ owner, block: owner.alloc(n, access) });
          } catch (err) {
            expect((err as AllocLimitError).code).toBe('ERR_ALLOC_LIMIT');
            limited++;
          }
        }
        const s = a.stats();
        // One limit for the family; the registrar's books agree with the allocators'.
        expect(s.registeredBytes + s.peerPools.registeredBytes).toBeLessThanOrEqual(12 * MiB);
        expect(reg.liveBytes).toBe(s.registeredBytes + s.peerPools.registeredBytes);
      }
      // The limit was in the way, and pools gave back empty arenas for one another.
      expect(limited).toBeGreaterThan(0);
      expect(reg.count('deregister')).toBeGreaterThan(0);
      // No registered region holds blocks of two allocators.
      const ownerOfRegion = new Map<unknown, RegisteredAllocator>();
      for (const { owner, block } of live) {
        const region = regionOf(reg, block);
        expect(region).toBeDefined();
        const seen = ownerOfRegion.get(region);
        if (seen !== undefined) expect(seen).toBe(owner);
        ownerOfRegion.set(region, owner);
        expect(owner.owns(block)).toBe(true);
      }
      expect(a.leakReport().liveBlocks).toBe(live.length);
      a.close();
      for (const { block } of live) block.release();
      expect(reg.live.size).toBe(0);
      for (const o of owners) expect(o.state).toBe('closed');
    }
  });
});

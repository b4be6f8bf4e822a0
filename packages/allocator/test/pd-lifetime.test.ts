// Issue 17, finding 5: the allocator follows its PD's lifetime. Once the PD (or its device)
// is closed, alloc throws ERR_ALLOC_CLOSED, outstanding blocks throw ERR_ALLOC_CLOSED when
// their bytes or keys are touched (never a detached-ArrayBuffer TypeError), and releasing
// them does nothing. A generic registrar says the same through its optional `closed`.
import { openDevice } from '@rdmajs/verbs';
import { describe, expect, it } from 'vitest';
import {
  type Block,
  fromProtectionDomain,
  RegisteredAllocator,
  type Registrar,
} from '../src/index.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { expectCode, KiB, MiB } from './helpers.js';

function touchAll(b: Block): void {
  expectCode(() => b.bytes, 'ERR_ALLOC_CLOSED');
  expectCode(() => b.addr, 'ERR_ALLOC_CLOSED');
  expectCode(() => b.lkey, 'ERR_ALLOC_CLOSED');
  expectCode(() => b.rkey, 'ERR_ALLOC_CLOSED');
  expectCode(() => b.sge(), 'ERR_ALLOC_CLOSED');
  expectCode(() => b.slice(0, 1), 'ERR_ALLOC_CLOSED');
}

describe('allocator over a PD that closes', () => {
  for (const what of ['device', 'pd'] as const) {
    it(`after ${what}.close(): alloc is ERR_ALLOC_CLOSED, live blocks are ERR_ALLOC_CLOSED, release is a no-op`, () => {
      const dev = openDevice({ provider: 'soft' });
      const pd = dev.allocPd();
      const a = fromProtectionDomain(pd, { arenaBytes: 1 * MiB, maxArenaBytes: 1 * MiB });
      const small = a.alloc(100);
      const large = a.alloc(100 * KiB);
      const dedicated = a.alloc(2 * MiB, 'remote-write');
      const slice = small.slice(10, 20);
      const pinned = a.cache.acquire(new Uint8Array(64));
      small.bytes.fill(1);
      const released = a.alloc(10);
      released.release();
      if (what === 'device') dev.close();
      else pd.close();

      expectCode(() => a.alloc(10), 'ERR_ALLOC_CLOSED');
      expectCode(() => a.reserve(10), 'ERR_ALLOC_CLOSED');
      expectCode(() => a.cache.acquire(new ArrayBuffer(8)), 'ERR_ALLOC_CLOSED');
      for (const b of [small, large, dedicated]) {
        touchAll(b);
        expect(b.state).toBe('revoked');
        b.release(); // no-op
        a.release(b); // no-op too
      }
      expectCode(() => slice.bytes, 'ERR_ALLOC_CLOSED');
      expectCode(() => pinned.lkey, 'ERR_ALLOC_CLOSED');
      pinned.release();
      // A block released before the close is still a use after release.
      expectCode(() => released.bytes, 'ERR_ALLOC_USE_AFTER_RELEASE');
      expect(a.state).toBe('closed');
      expect(a.stats()).toMatchObject({
        state: 'closed',
        liveBlocks: 0,
        inUseBytes: 0,
        registeredBytes: 0,
        arenas: [],
        cache: { state: 'closed', entries: 0, registeredBytes: 0 },
      });
      expect(a.trim()).toBe(0);
      a.close();
      a.destroy();
      dev.close();
    });
  }

  it('constructing on a closed PD is ERR_ALLOC_CLOSED', () => {
    const dev = openDevice({ provider: 'soft' });
    const pd = dev.allocPd();
    dev.close();
    expectCode(() => fromProtectionDomain(pd), 'ERR_ALLOC_CLOSED');
  });

  it('a generic registrar says it is gone through `closed`: the same, and deregister is never called after', () => {
    const reg = new FakeRegistrar();
    let closed = false;
    const registrar: Registrar = {
      allocate: (length, access) => reg.allocate(length, access),
      register: (bytes, access) => reg.register(bytes, access),
      deregister: (region) => reg.deregister(region as never),
      get closed() {
        return closed;
      },
    };
    const a = new RegisteredAllocator({ registrar, arenaBytes: 1 * MiB });
    const b = a.alloc(1000);
    a.close(); // closing: b is live, its arena stays registered
    expect(a.state).toBe('closing');
    closed = true;
    const deregistrations = reg.count('deregister');
    touchAll(b);
    b.release();
    a.destroy();
    expect(a.state).toBe('closed');
    expect(reg.count('deregister')).toBe(deregistrations);
  });
});

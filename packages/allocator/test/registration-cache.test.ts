import { Buffer } from 'node:buffer';
import { describe, expect, it } from 'vitest';
import {
  Access,
  AllocLimitError,
  RegisteredBuffer,
  type Registrar,
  RegistrationCache,
} from '../src/index.js';
import { type FakeRegion, FakeRegistrar } from './fakes/FakeRegistrar.js';
import { expectCode, KiB } from './helpers.js';

function setupCache(maxBytes = 64 * KiB, maxEntries = 8) {
  const reg = new FakeRegistrar();
  const cache = new RegistrationCache({ registrar: reg, maxBytes, maxEntries });
  return { reg, cache };
}

describe('RegistrationCache', () => {
  it('registers a buffer once, in place, and reuses the registration by identity', () => {
    const { reg, cache } = setupCache();
    const buf = new ArrayBuffer(4 * KiB);
    const r1 = cache.acquire(buf);
    expect(r1).toBeInstanceOf(RegisteredBuffer);
    expect(r1.bytes.buffer).toBe(buf); // the application's memory, not a copy
    const region = reg.regionOf(r1.addr, r1.length);
    expect(region?.bytes.buffer).toBe(buf);
    expect(r1).toMatchObject({ lkey: region?.lkey, rkey: region?.rkey, length: 4 * KiB });
    r1.release();
    const r2 = cache.acquire(buf);
    expect(r2.lkey).toBe(region?.lkey);
    expect(reg.count('register')).toBe(1);
    expect(cache.stats()).toMatchObject({ hits: 1, misses: 1, entries: 1, pinnedEntries: 1 });
    r2.release();
  });

  it('serves any view of a registered ArrayBuffer at its offset, without registering again', () => {
    const { reg, cache } = setupCache();
    const buf = new ArrayBuffer(8 * KiB);
    const whole = cache.acquire(new Uint8Array(buf));
    const floats = new Float32Array(buf, 1024, 16);
    const part = cache.acquire(floats);
    expect(part.addr).toBe(whole.addr + 1024);
    expect(part.length).toBe(64);
    expect(part.bytes.byteOffset).toBe(1024);
    expect(part.bytes.buffer).toBe(buf);
    expect(part.sge(4, 8)).toEqual({ addr: whole.addr + 1028, length: 8, lkey: whole.lkey });
    expect(reg.count('register')).toBe(1);
    part.release();
    whole.release();
  });

  it('keeps one registration per access policy, with that policy’s flags', () => {
    const { reg, cache } = setupCache();
    const buf = new Uint8Array(1024);
    const local = cache.acquire(buf);
    const remote = cache.acquire(buf, 'remote-read');
    expect(local.lkey).not.toBe(remote.lkey);
    expect(remote.access).toBe('remote-read');
    expect(reg.calls.map((c) => c.access)).toEqual([
      Access.LocalWrite,
      Access.LocalWrite | Access.RemoteRead,
    ]);
    local.release();
    remote.release();
  });

  it('exposes to peers only the pages around a view, and reuses them for views inside', () => {
    const { reg, cache } = setupCache(256 * KiB);
    const buf = new ArrayBuffer(64 * KiB);
    const mid = cache.acquire(new Uint8Array(buf, 20 * KiB + 100, 200), 'remote-write');
    const region = reg.regionByKey(mid.lkey);
    // pages [20, 24) KiB of the buffer: nothing else of it is reachable with this rkey
    expect(region?.bytes.byteOffset).toBe(20 * KiB);
    expect(region?.bytes.byteLength).toBe(4 * KiB);
    expect(cache.stats().registeredBytes).toBe(4 * KiB);
    const inside = cache.acquire(new Uint8Array(buf, 21 * KiB, 1024), 'remote-write');
    expect(inside.rkey).toBe(mid.rkey);
    expect(inside.addr).toBe(mid.addr - 100 + KiB); // same registration, its own offset
    expect(reg.count('register')).toBe(1);
    // a view crossing the registered pages gets pages of its own
    const across = cache.acquire(new Uint8Array(buf, 23 * KiB, 2 * KiB), 'remote-write');
    expect(across.rkey).not.toBe(mid.rkey);
    expect(reg.regionByKey(across.lkey)?.bytes.byteOffset).toBe(20 * KiB);
    // the last page is cut at the buffer's end
    const tail = cache.acquire(new Uint8Array(buf, 64 * KiB - 10, 10), 'remote-read');
    expect(reg.regionByKey(tail.lkey)?.bytes.byteLength).toBe(4 * KiB);
    // local access still registers the whole buffer once
    const local = cache.acquire(new Uint8Array(buf, 100, 10));
    expect(reg.regionByKey(local.lkey)?.bytes.byteLength).toBe(64 * KiB);
    for (const r of [mid, inside, across, tail, local]) r.release();
  });

  it('never hands a view the key of a wider registration made for a bigger view', () => {
    const { reg, cache } = setupCache(256 * KiB);
    const buf = new ArrayBuffer(64 * KiB);
    const wide = cache.acquire(new Uint8Array(buf, 8 * KiB, 16 * KiB), 'remote-read');
    expect(reg.regionByKey(wide.lkey)?.bytes.byteLength).toBe(16 * KiB);
    // a view in one page of it: its own registration of that page, not the 16 KiB one
    const narrow = cache.acquire(new Uint8Array(buf, 12 * KiB + 10, 100), 'remote-read');
    expect(narrow.rkey).not.toBe(wide.rkey);
    const region = reg.regionByKey(narrow.lkey);
    expect(region?.bytes.byteOffset).toBe(12 * KiB);
    expect(region?.bytes.byteLength).toBe(4 * KiB);
    // the same pages again: a hit
    const again = cache.acquire(new Uint8Array(buf, 12 * KiB, 4 * KiB), 'remote-read');
    expect(again.rkey).toBe(narrow.rkey);
    expect(reg.count('register')).toBe(2);
    for (const r of [wide, narrow, again]) r.release();
  });

  it('refuses remote access to a Buffer from Node’s shared pool, which holds other data', () => {
    const { reg, cache } = setupCache();
    const pooled = Buffer.from('secret neighbour');
    expect(pooled.buffer.byteLength).toBe(Buffer.poolSize);
    expectCode(() => cache.acquire(pooled, 'remote-read'), 'ERR_ALLOC_INVALID_ARG');
    expectCode(() => cache.acquire(pooled, 'remote-write'), 'ERR_ALLOC_INVALID_ARG');
    expect(reg.count('register')).toBe(0);
    // local access is fine (no key leaves the process), as is a Buffer of its own memory
    cache.acquire(pooled).release();
    cache.acquire(Buffer.alloc(16), 'remote-read').release();
    // every way of getting a pooled Buffer, and a subarray of one
    const unsafe = Buffer.allocUnsafe(100);
    for (const b of [unsafe, Buffer.concat([pooled, pooled]), unsafe.subarray(10, 20)]) {
      expect(b.buffer.byteLength).not.toBe(b.byteLength);
      expectCode(() => cache.acquire(b, 'remote-read-write'), 'ERR_ALLOC_INVALID_ARG');
    }
    expect(reg.count('register')).toBe(2);
  });

  it('evicts idle registrations least recently used first when bytes would exceed maxBytes', () => {
    const { reg, cache } = setupCache(12 * KiB, 100);
    const [x, y, z, w] = [1, 2, 3, 4].map(() => new ArrayBuffer(4 * KiB));
    for (const b of [x, y, z]) cache.acquire(b as ArrayBuffer).release();
    cache.acquire(x as ArrayBuffer).release(); // x is now the most recently used
    cache.acquire(w as ArrayBuffer).release(); // evicts y, the least recently used
    expect(cache.stats()).toMatchObject({ entries: 3, registeredBytes: 12 * KiB, evictions: 1 });
    const registers = reg.count('register');
    cache.acquire(x as ArrayBuffer).release();
    cache.acquire(z as ArrayBuffer).release();
    expect(reg.count('register')).toBe(registers); // x and z still cached
    cache.acquire(y as ArrayBuffer).release();
    expect(reg.count('register')).toBe(registers + 1); // y was the one evicted
  });

  it('evicts by count when maxEntries would be exceeded', () => {
    const { cache } = setupCache(1024 * KiB, 2);
    for (let i = 0; i < 5; i++) cache.acquire(new ArrayBuffer(100)).release();
    expect(cache.stats()).toMatchObject({ entries: 2, evictions: 3, deregistrations: 3 });
  });

  it('never evicts a pinned registration: full of pinned entries it throws a retryable ERR_ALLOC_LIMIT', () => {
    const { reg, cache } = setupCache(8 * KiB, 100);
    const a = cache.acquire(new ArrayBuffer(4 * KiB));
    const b = cache.acquire(new ArrayBuffer(4 * KiB));
    const err = expectCode(() => cache.acquire(new ArrayBuffer(1 * KiB)), 'ERR_ALLOC_LIMIT');
    expect(err).toBeInstanceOf(AllocLimitError);
    expect(err.retryable).toBe(true);
    expect(a.lkey).toBeGreaterThan(0); // still registered
    a.release();
    expect(cache.acquire(new ArrayBuffer(1 * KiB)).length).toBe(1 * KiB);
    expect(
      expectCode(() => cache.acquire(new ArrayBuffer(9 * KiB)), 'ERR_ALLOC_LIMIT').retryable,
    ).toBe(false);
    b.release();
    expect(reg.misuse).toEqual([]);
  });

  it('invalidate() deregisters idle registrations now and pinned ones at their last release', () => {
    const { reg, cache } = setupCache();
    const idle = new ArrayBuffer(1024);
    const busy = new ArrayBuffer(1024);
    cache.acquire(idle).release();
    const pinned = cache.acquire(busy);
    expect(cache.invalidate(idle)).toBe(1);
    expect(reg.live.size).toBe(1);
    expect(cache.invalidate(new Uint8Array(busy))).toBe(1);
    expect(reg.live.size).toBe(1); // still in use by `pinned`
    expect(pinned.lkey).toBeGreaterThan(0);
    const fresh = cache.acquire(busy); // a new registration, not the invalidated one
    expect(fresh.lkey).not.toBe(pinned.lkey);
    pinned.release();
    expect(reg.live.size).toBe(1);
    fresh.release();
    expect(cache.invalidate(new ArrayBuffer(1))).toBe(0);
    expect(cache.invalidateAll()).toBe(1);
    expect(reg.live.size).toBe(0);
    expect(cache.stats()).toMatchObject({ entries: 0, invalidations: 3 });
  });

  it('notices a buffer detached (transferred) since it was registered and registers afresh', () => {
    const { reg, cache } = setupCache();
    let buf = new ArrayBuffer(2048);
    cache.acquire(buf).release();
    structuredClone(buf, { transfer: [buf] }); // detaches buf
    expect(buf.byteLength).toBe(0);
    expectCode(() => cache.acquire(buf), 'ERR_ALLOC_INVALID_ARG'); // nothing left to register
    expect(cache.stats()).toMatchObject({ entries: 0, invalidations: 1 });
    buf = new ArrayBuffer(2048);
    cache.acquire(buf).release();
    expect(reg.live.size).toBe(1);
  });

  it('double release and use after release of a RegisteredBuffer are typed errors', () => {
    const { cache } = setupCache();
    const r = cache.acquire(new ArrayBuffer(100));
    r.release();
    expect(r.released).toBe(true);
    expectCode(() => r.release(), 'ERR_ALLOC_DOUBLE_RELEASE');
    for (const use of [() => r.addr, () => r.lkey, () => r.rkey, () => r.bytes, () => r.sge()]) {
      expectCode(use, 'ERR_ALLOC_USE_AFTER_RELEASE');
    }
    expect(cache.stats().pinnedEntries).toBe(0);
  });

  it('rejects what it cannot register with ERR_ALLOC_INVALID_ARG', () => {
    const { cache } = setupCache();
    for (const bad of [new ArrayBuffer(0), new Uint8Array(0), 'buffer', 42, null]) {
      expectCode(() => cache.acquire(bad as ArrayBuffer), 'ERR_ALLOC_INVALID_ARG');
    }
    expectCode(() => cache.acquire(new ArrayBuffer(8), 'open' as never), 'ERR_ALLOC_INVALID_ARG');
    const r = cache.acquire(new ArrayBuffer(8));
    expectCode(() => r.sge(4, 5), 'ERR_ALLOC_INVALID_ARG');
    r.release();
  });

  it('a registrar failure is ERR_ALLOC_REGISTRATION and leaves the cache unchanged', () => {
    const { reg, cache } = setupCache();
    reg.failNext('register');
    const buf = new ArrayBuffer(64);
    expectCode(() => cache.acquire(buf), 'ERR_ALLOC_REGISTRATION');
    expect(cache.stats()).toMatchObject({ entries: 0, pinnedEntries: 0, registeredBytes: 0 });
    cache.acquire(buf).release();
    expect(cache.stats().entries).toBe(1);
  });

  it('rejects a registrar that copies instead of registering in place', () => {
    const reg = new FakeRegistrar();
    const copying: Registrar<FakeRegion> = {
      register: (bytes, access) => reg.register(bytes.slice(), access),
      deregister: (r) => reg.deregister(r),
    };
    const cache = new RegistrationCache({ registrar: copying });
    expect(
      expectCode(() => cache.acquire(new ArrayBuffer(64)), 'ERR_ALLOC_REGISTRATION').message,
    ).toContain('in place');
    expect(reg.live.size).toBe(0);
  });

  it('close() deregisters idle registrations now and pinned ones at release; destroy() all at once', () => {
    const { reg, cache } = setupCache();
    cache.acquire(new ArrayBuffer(100)).release();
    const pinned = cache.acquire(new ArrayBuffer(100));
    cache.close();
    expect(cache.state).toBe('closing');
    expect(reg.live.size).toBe(1);
    expectCode(() => cache.acquire(new ArrayBuffer(1)), 'ERR_ALLOC_CLOSED');
    pinned.release();
    expect(cache.state).toBe('closed');
    expect(reg.live.size).toBe(0);
    cache.close(); // idempotent

    const second = setupCache();
    const held = second.cache.acquire(new ArrayBuffer(100));
    second.cache.destroy();
    expect(second.cache.state).toBe('closed');
    expect(second.reg.live.size).toBe(0);
    expectCode(() => held.addr, 'ERR_ALLOC_CLOSED');
    held.release(); // harmless after destroy
    expect(second.reg.misuse).toEqual([]);
  });
});

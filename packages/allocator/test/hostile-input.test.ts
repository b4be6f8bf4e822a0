// Issue 17, findings 1, 4 and 6 and options objects: what a user types by mistake gets a
// typed error with a stable code, honest `retryable`, and a message that shows the value.
import { openDevice } from '@rdmajs/verbs';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AllocError,
  Block,
  fromProtectionDomain,
  RegisteredAllocator,
  type Registrar,
  RegistrationCache,
  verbsRegistrar,
} from '../src/index.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { expectCode, MiB, setup } from './helpers.js';

const devices: Array<{ close(): void }> = [];
afterEach(() => {
  for (const d of devices.splice(0)) d.close();
});

function softPd() {
  const dev = openDevice({ provider: 'soft' });
  devices.push(dev);
  return { dev, pd: dev.allocPd() };
}

describe('registrations the registrar refuses (finding 1)', () => {
  it('a registrar that throws a programming error: ERR_ALLOC_REGISTRATION with the cause, not retryable, allocator usable', () => {
    const { a, reg } = setup();
    a.alloc(10);
    const before = a.stats();
    const bug = new TypeError('pd.allocMr is not a function');
    reg.failNext('allocate', bug);
    const err = expectCode(() => a.alloc(3 * MiB), 'ERR_ALLOC_REGISTRATION');
    expect(err).toMatchObject({ operation: 'allocate', retryable: false, cause: bug });
    expect(a.stats()).toEqual({ ...before, failedAllocs: 1 });
    expect(a.alloc(3 * MiB).length).toBe(3 * MiB);
  });

  it('an unexplained registrar failure is not retryable; a resource shortage (errno/code) is', () => {
    const { a, reg } = setup();
    reg.failNext('allocate', new Error('something broke'));
    expect(expectCode(() => a.alloc(10), 'ERR_ALLOC_REGISTRATION').retryable).toBe(false);
    reg.failNext('allocate', Object.assign(new Error('busy'), { code: 'EAGAIN' }));
    expect(expectCode(() => a.alloc(10), 'ERR_ALLOC_REGISTRATION').retryable).toBe(true);
    reg.failNext('allocate', 'a string, not an error');
    expect(expectCode(() => a.alloc(10), 'ERR_ALLOC_REGISTRATION').retryable).toBe(false);
    reg.failNext('allocate', Object.create(null)); // no toString: the message must not throw
    expect(expectCode(() => a.alloc(10), 'ERR_ALLOC_REGISTRATION').retryable).toBe(false);
    expect(a.alloc(10).length).toBe(10);
  });

  it('soft provider: a size above the device maxMrSize is ERR_ALLOC_REGISTRATION (cause ERR_RDMA_OUT_OF_RANGE), not retryable; all stays usable', () => {
    const { dev, pd } = softPd();
    const maxMrSize = Number(dev.info.limits.maxMrSize); // a number today; a bigint once 64-bit limits are exact
    const a = fromProtectionDomain(pd, { maxRegisteredBytes: 2 * maxMrSize + 2 * MiB });
    const err = expectCode(() => a.alloc(maxMrSize + 1), 'ERR_ALLOC_REGISTRATION');
    expect(err.retryable).toBe(false);
    expect((err.cause as { code?: unknown }).code).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(a.stats()).toMatchObject({ registeredBytes: 0, liveBlocks: 0, failedAllocs: 1 });
    const b = a.alloc(4096);
    b.bytes.fill(7);
    expect(b.bytes[4095]).toBe(7);
    b.release();
    expect(pd.allocMr(4096, 1).length).toBe(4096); // the device too
    a.close();
  });

  it('sizes past what an ArrayBuffer can hold fail up front, not retryable, with nothing registered', () => {
    const reg = new FakeRegistrar();
    const a = new RegisteredAllocator({
      registrar: reg.withoutAllocate(), // the allocator creates the memory itself
      maxRegisteredBytes: Number.MAX_SAFE_INTEGER,
    });
    for (const n of [2 ** 32 + 1, 2 ** 40, Number.MAX_SAFE_INTEGER]) {
      const err = expectCode(() => a.alloc(n), 'ERR_ALLOC_REGISTRATION');
      expect(err.retryable).toBe(false);
      expect(err.message).toContain('largest ArrayBuffer');
    }
    expect(reg.calls).toEqual([]);
    expect(a.alloc(100).length).toBe(100);
  });

  it('reserve() of 2^53 - 1 bytes fails before registering anything and says it can never fit', () => {
    const { a, reg } = setup({ maxRegisteredBytes: 8 * MiB });
    const err = expectCode(() => a.reserve(Number.MAX_SAFE_INTEGER), 'ERR_ALLOC_LIMIT');
    expect(err.retryable).toBe(false);
    expect(reg.calls).toEqual([]);
    expect(a.stats().registeredBytes).toBe(0);
  });

  it('a reserve() that fails on the registrar half-way rolls back what it registered', () => {
    const reg = new FakeRegistrar();
    let calls = 0;
    const registrar: Registrar = {
      allocate: (length, access) => {
        if (++calls === 3) throw Object.assign(new Error('out of memory'), { code: 'ENOMEM' });
        return reg.allocate(length, access);
      },
      register: (bytes, access) => reg.register(bytes, access),
      deregister: (region) => reg.deregister(region as never),
    };
    const a = new RegisteredAllocator({ registrar, arenaBytes: 1 * MiB, maxArenaBytes: 1 * MiB });
    const err = expectCode(() => a.reserve(3 * MiB), 'ERR_ALLOC_REGISTRATION');
    expect(err.retryable).toBe(true);
    expect(reg.live.size).toBe(0);
    expect(a.stats()).toMatchObject({ registeredBytes: 0, arenas: [] });
    a.reserve(3 * MiB); // the same call later succeeds
    expect(a.stats().registeredBytes).toBe(3 * MiB);
  });

  it('2^53 and other unsafe sizes are ERR_ALLOC_INVALID_ARG; exact page arithmetic at 2^31', () => {
    const { a } = setup();
    for (const n of [2 ** 53, -1, 0, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expectCode(() => a.alloc(n), 'ERR_ALLOC_INVALID_ARG');
    }
    // A 2 GiB arena (the largest): a block of exactly 2^31 bytes and one a page short of it.
    const { a: big, reg } = setup({
      arenaBytes: 2 ** 31,
      maxArenaBytes: 2 ** 31,
      maxRegisteredBytes: 2 ** 33,
    });
    const whole = big.alloc(2 ** 31);
    expect(whole.capacity).toBe(2 ** 31);
    expect(reg.regionOf(whole.addr, whole.capacity)?.length).toBe(2 ** 31);
    whole.release();
    const tail = 9 * 4096; // a large block (over 32 KiB) in the last pages of the arena
    const x = big.alloc(2 ** 31 - tail - 5);
    expect(x.capacity).toBe(2 ** 31 - tail);
    const y = big.alloc(tail);
    expect(y.addr - x.addr).toBe(2 ** 31 - tail);
    expect(big.stats().arenas).toHaveLength(1);
    expect(big.stats().allocatedBytes).toBe(2 ** 31);
    x.release();
    y.release();
    big.destroy();
  });
});

describe('registrar validated at construction; misuse never retryable (finding 4)', () => {
  it('fromProtectionDomain(device) fails at once with ERR_ALLOC_INVALID_ARG naming the mistake', () => {
    const { dev } = softPd();
    const err = expectCode(() => fromProtectionDomain(dev as never), 'ERR_ALLOC_INVALID_ARG');
    expect(err.retryable).toBe(false);
    expect(err.message).toContain('dev.allocPd()');
    for (const notPd of [undefined, null, 'pd', 42, {}, { allocMr: () => 0 }, [], () => 0]) {
      expect(
        expectCode(() => fromProtectionDomain(notPd as never), 'ERR_ALLOC_INVALID_ARG').retryable,
      ).toBe(false);
      expectCode(() => verbsRegistrar(notPd as never), 'ERR_ALLOC_INVALID_ARG');
    }
  });

  it('a registrar without its functions, or with a non-boolean closed, is ERR_ALLOC_INVALID_ARG', () => {
    const ok = { register: () => ({}), deregister: () => {} };
    for (const registrar of [
      undefined,
      'registrar',
      {},
      { register: () => ({}) },
      { ...ok, allocate: 'no' },
      { ...ok, closed: 'no' },
    ]) {
      expectCode(() => new RegisteredAllocator({ registrar } as never), 'ERR_ALLOC_INVALID_ARG');
      expectCode(() => new RegistrationCache({ registrar } as never), 'ERR_ALLOC_INVALID_ARG');
    }
  });

  it('user mistakes and use after close are never retryable', () => {
    const { a } = setup();
    const other = setup().a;
    const b = a.alloc(10);
    const foreign = other.alloc(10);
    b.release();
    const mistakes: Array<() => unknown> = [
      () => a.alloc(-1),
      () => a.alloc(10, 'nope' as never),
      () => b.release(),
      () => b.bytes,
      () => a.release(foreign),
      () => a.release({} as never),
      () => a.reserve(Number.NaN),
      () => a.cache.acquire('buffer' as never),
      () => a.cache.acquire(new ArrayBuffer(0)),
    ];
    a.close();
    mistakes.push(
      () => a.alloc(1),
      () => a.cache.acquire(new ArrayBuffer(8)),
    );
    for (const m of mistakes) {
      let thrown: unknown;
      try {
        m();
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(AllocError);
      expect((thrown as AllocError).retryable).toBe(false);
    }
  });
});

describe('messages show the type and the value (finding 6)', () => {
  it('alloc, options, access policies and ranges', () => {
    const { a, reg } = setup();
    expect(expectCode(() => a.alloc('64' as never), 'ERR_ALLOC_INVALID_ARG').message).toContain(
      "got string '64'",
    );
    expect(expectCode(() => a.alloc(1.5), 'ERR_ALLOC_INVALID_ARG').message).toContain(
      'got number 1.5',
    );
    expect(expectCode(() => a.alloc(10n as never), 'ERR_ALLOC_INVALID_ARG').message).toContain(
      'got bigint 10n',
    );
    expect(
      expectCode(
        () => new RegisteredAllocator({ registrar: reg, arenaBytes: '1' as never }),
        'ERR_ALLOC_INVALID_ARG',
      ).message,
    ).toContain("got string '1'");
    expect(
      expectCode(() => a.alloc(8, 'remote' as never), 'ERR_ALLOC_INVALID_ARG').message,
    ).toContain("string 'remote'");
    const b = a.alloc(8);
    expect(expectCode(() => b.sge('1' as never), 'ERR_ALLOC_INVALID_ARG').message).toContain(
      "offset string '1'",
    );
    expect(expectCode(() => a.reserve(null as never), 'ERR_ALLOC_INVALID_ARG').message).toContain(
      'got null',
    );
  });
});

describe('options objects: plain objects, own properties only', () => {
  it('a string or array where options belong is ERR_ALLOC_INVALID_ARG, never a raw TypeError', () => {
    const { pd } = softPd();
    const reg = new FakeRegistrar();
    for (const bad of ['soft', 42, [], new Map(), new String('x'), null]) {
      expectCode(() => new RegisteredAllocator(bad as never), 'ERR_ALLOC_INVALID_ARG');
      expectCode(() => new RegistrationCache(bad as never), 'ERR_ALLOC_INVALID_ARG');
      expectCode(() => fromProtectionDomain(pd, bad as never), 'ERR_ALLOC_INVALID_ARG');
      expectCode(
        () => new RegisteredAllocator({ registrar: reg, cache: bad } as never),
        'ERR_ALLOC_INVALID_ARG',
      );
    }
    expectCode(() => new RegisteredAllocator(undefined as never), 'ERR_ALLOC_INVALID_ARG');
  });

  it('inherited properties are not read (neither a prototype object nor a polluted Object.prototype)', () => {
    const reg = new FakeRegistrar();
    const o = Object.assign(Object.create({ maxRegisteredBytes: 4096, debug: true }), {
      registrar: reg,
    });
    const a = new RegisteredAllocator(o);
    expect(a.stats().maxRegisteredBytes).toBe(1024 * MiB);
    expect(a.debug).toBe(false);
    const proto = Object.prototype as Record<string, unknown>;
    proto.maxBytes = 1;
    proto.debug = true;
    try {
      const b = new RegisteredAllocator({ registrar: reg });
      expect(b.debug).toBe(false);
      expect(b.cache.stats().maxBytes).toBe(256 * MiB);
    } finally {
      delete proto.maxBytes;
      delete proto.debug;
    }
    // The registrar may be a class instance: its methods come from its prototype.
    expect(new RegisteredAllocator({ registrar: reg }).alloc(10).length).toBe(10);
  });
});

describe('found by the model-based fuzz', () => {
  it('a bigint or string offset with no length is ERR_ALLOC_INVALID_ARG (the default length is not computed from it)', () => {
    const { a } = setup();
    const b = a.alloc(64);
    for (const offset of [10n, '1', null, {}]) {
      expectCode(() => b.sge(offset as never), 'ERR_ALLOC_INVALID_ARG');
      expectCode(() => b.slice(offset as never), 'ERR_ALLOC_INVALID_ARG');
      expectCode(() => b.slice(0).sge(offset as never), 'ERR_ALLOC_INVALID_ARG');
      expectCode(() => b.slice(0).slice(offset as never), 'ERR_ALLOC_INVALID_ARG');
      const buf = a.cache.acquire(new ArrayBuffer(16));
      expectCode(() => buf.sge(offset as never), 'ERR_ALLOC_INVALID_ARG');
      buf.release();
    }
    expect(b.sge(8)).toMatchObject({ length: 56 });
    expect(b.slice(8).length).toBe(56);
  });

  it('release() of an object made from Block.prototype is ERR_ALLOC_FOREIGN_BLOCK, not a TypeError', () => {
    const { a } = setup();
    const fake = Object.create(Block.prototype) as Block;
    expectCode(() => a.release(fake), 'ERR_ALLOC_FOREIGN_BLOCK');
    expect(a.owns(fake)).toBe(false);
  });

  it('destroy() after close() deregisters buffers still pinned in the cache', () => {
    const { a, reg } = setup();
    const pinned = a.cache.acquire(new ArrayBuffer(64));
    a.close();
    expect(a.state).toBe('closed');
    a.destroy();
    expect(reg.live.size).toBe(0);
    expectCode(() => pinned.lkey, 'ERR_ALLOC_CLOSED');
    pinned.release();
  });

  it('reserve() of more than maxRegisteredBytes is a non-retryable ERR_ALLOC_LIMIT even with free arena space', () => {
    const { a } = setup({ arenaBytes: 1 * MiB, maxRegisteredBytes: 2 * MiB });
    a.alloc(10).release(); // one arena registered, mostly free
    expect(expectCode(() => a.reserve(2 * MiB + 1), 'ERR_ALLOC_LIMIT').retryable).toBe(false);
  });
});

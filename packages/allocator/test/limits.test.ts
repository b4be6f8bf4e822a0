import { describe, expect, it } from 'vitest';
import {
  AllocLimitError,
  AllocRegistrationError,
  type Block,
  RegisteredAllocator,
  type Registrar,
} from '../src/index.js';
import { type FakeRegion, FakeRegistrar } from './fakes/FakeRegistrar.js';
import { expectCode, KiB, MiB, setup } from './helpers.js';

describe('limits and registration', () => {
  it('never registers past maxRegisteredBytes; the limit error is retryable when a release helps', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB, maxRegisteredBytes: 3 * MiB });
    const blocks: Block[] = [];
    for (let i = 0; i < 6; i++) blocks.push(a.alloc(512 * KiB));
    const err = expectCode(() => a.alloc(512 * KiB), 'ERR_ALLOC_LIMIT') as AllocLimitError;
    expect(err).toBeInstanceOf(AllocLimitError);
    expect(err).toMatchObject({ retryable: true, limit: 3 * MiB });
    expect(reg.liveBytes).toBe(3 * MiB);
    expect(a.stats()).toMatchObject({ registeredBytes: 3 * MiB, failedAllocs: 1 });
    blocks.pop()?.release();
    expect(a.alloc(512 * KiB).length).toBe(512 * KiB);
    // A request that can never fit is not retryable.
    expect(expectCode(() => a.alloc(4 * MiB), 'ERR_ALLOC_LIMIT').retryable).toBe(false);
  });

  it('shrinks the last arena to what the limit leaves', () => {
    const { a } = setup({ arenaBytes: 1 * MiB, maxRegisteredBytes: 2.5 * MiB });
    for (let i = 0; i < 5; i++) a.alloc(512 * KiB);
    expect(a.stats().arenas.map((s) => s.bytes)).toEqual([1 * MiB, 1 * MiB, 0.5 * MiB]);
    expectCode(() => a.alloc(1), 'ERR_ALLOC_LIMIT');
  });

  it('at the limit, deregisters retained empty arenas (of any policy, as many as needed) before failing', () => {
    const { a, reg } = setup({
      arenaBytes: 1 * MiB,
      maxRegisteredBytes: 2 * MiB,
      retainEmptyArenas: 2,
    });
    const local = [a.alloc(1 * MiB), a.alloc(1 * MiB)];
    for (const b of local) b.release();
    expect(a.stats().arenas).toHaveLength(2); // both retained
    const remote = a.alloc(1 * MiB, 'remote-write');
    expect(remote.access).toBe('remote-write');
    expect(reg.liveBytes).toBeLessThanOrEqual(2 * MiB);
    expect(
      a
        .stats()
        .arenas.map((s) => s.access)
        .sort(),
    ).toEqual(['local', 'remote-write']);
  });

  it('keeps retainEmptyArenas empty arenas per policy and deregisters the others', () => {
    for (const retain of [0, 1, 2]) {
      const { a, reg } = setup({ arenaBytes: 1 * MiB, retainEmptyArenas: retain });
      const blocks = [a.alloc(1 * MiB), a.alloc(1 * MiB), a.alloc(1 * MiB)];
      for (const b of blocks) b.release();
      expect(a.stats().arenas).toHaveLength(retain);
      expect(reg.liveBytes).toBe(retain * MiB);
      expect(a.stats().deregistrations).toBe(3 - retain);
    }
  });

  it('a_large_block_after_smaller_ones_reuses_its_arena_at_the_retention_boundary', () => {
    // One more empty arena than retained after each message: a small arena and a large
    // block's own arena. Retiring the arena that just emptied re-registered the large one
    // per message; retiring the one empty the longest registers each arena once.
    for (const retain of [0, 1, 2]) {
      const { a, reg } = setup({ arenaBytes: 1 * MiB, retainEmptyArenas: retain });
      for (let i = 0; i < 50; i++) {
        a.alloc(100 * 1024).release();
        a.alloc(4 * MiB).release();
      }
      const s = a.stats();
      // retain 0 keeps nothing: both arenas come and go each round, as asked.
      if (retain === 0) expect(s.registrations).toBe(100);
      else expect(s.registrations).toBeLessThanOrEqual(2);
      // Bounded: at most `retain` empty arenas stay registered, the largest one here.
      expect(s.arenas.length).toBe(retain === 0 ? 0 : Math.min(retain, 2));
      expect(reg.liveBytes).toBeLessThanOrEqual(retain * 4 * MiB);
      expect(s.registrations - s.deregistrations).toBe(s.arenas.length);
    }
  });

  it('small_and_large_blocks_interleaved_register_no_arena_in_steady_state', () => {
    // A small block held while large ones come and go (a header and its payload): both
    // arenas are the working set, so both must be retained (one would go with 1: a count
    // bound is a count bound).
    const { a } = setup({ arenaBytes: 1 * MiB, retainEmptyArenas: 2 });
    for (let i = 0; i < 3; i++) {
      const small = a.alloc(100 * 1024);
      a.alloc(4 * MiB).release();
      small.release();
    }
    const warm = a.stats().registrations;
    for (let i = 0; i < 50; i++) {
      const small = a.alloc(100 * 1024);
      a.alloc(4 * MiB).release();
      small.release();
    }
    expect(a.stats().registrations).toBe(warm);
  });

  it('wraps a registrar failure as ERR_ALLOC_REGISTRATION and leaves the allocator unchanged', () => {
    const { a, reg } = setup();
    a.alloc(10);
    const before = a.stats();
    const enomem = Object.assign(new Error('ibv_reg_mr failed: Cannot allocate memory'), {
      errno: 12,
    });
    reg.failNext('allocate', enomem);
    const err = expectCode(
      () => a.alloc(2 * MiB),
      'ERR_ALLOC_REGISTRATION',
    ) as AllocRegistrationError;
    expect(err).toBeInstanceOf(AllocRegistrationError);
    expect(err).toMatchObject({ operation: 'allocate', retryable: true, cause: enomem });
    expect(err.message).toContain('Cannot allocate memory');
    expect(a.stats()).toEqual({ ...before, failedAllocs: 1 });
    expect(a.alloc(2 * MiB).length).toBe(2 * MiB);
    // A registrar error that says it is not retryable stays so.
    reg.failNext('allocate', Object.assign(new Error('EINVAL'), { retryable: false }));
    expect(expectCode(() => a.alloc(3 * MiB), 'ERR_ALLOC_REGISTRATION').retryable).toBe(false);
  });

  it('rejects (and deregisters) a region that is too short or has bad keys', () => {
    const reg = new FakeRegistrar();
    const cases: Array<(r: FakeRegion) => FakeRegion> = [
      (r) => ({ ...r, bytes: r.bytes.subarray(0, 100) }),
      (r) => ({ ...r, lkey: -1 }),
      (r) => ({ ...r, addr: Number.NaN }),
    ];
    for (const tamper of cases) {
      const registrar: Registrar<FakeRegion> = {
        allocate: (length, access) => tamper(reg.allocate(length, access)),
        register: (bytes, access) => reg.register(bytes, access),
        deregister: (r) => reg.deregister(r), // the copy keeps the original's id
      };
      const a = new RegisteredAllocator({ arenaBytes: 1 * MiB, registrar });
      expect(expectCode(() => a.alloc(10), 'ERR_ALLOC_REGISTRATION').retryable).toBe(false);
      expect(reg.live.size).toBe(0);
      expect(a.stats()).toMatchObject({ registeredBytes: 0, registrations: 1, deregistrations: 1 });
    }
    expect(reg.misuse).toEqual([]);
  });

  it('reports a failed deregistration after the block is released and the books are straight', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB, maxArenaBytes: 1 * MiB });
    const big = a.alloc(2 * MiB);
    reg.failNext('deregister');
    const err = expectCode(() => big.release(), 'ERR_ALLOC_REGISTRATION');
    expect(err).toMatchObject({ operation: 'deregister', retryable: false });
    expect(big.released).toBe(true);
    expect(a.stats()).toMatchObject({
      liveBlocks: 0,
      registeredBytes: 0,
      dedicatedBytes: 0,
      deregistrationFailures: 1,
    });
  });

  it('reserve() registers ahead so the data path does not, and keeps it when empty until trim()', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB, retainEmptyArenas: 0 });
    a.reserve(3 * MiB, 'remote-write');
    const registered = reg.count('allocate');
    expect(registered).toBe(1); // one arena of 3 MiB (reserve goes up to maxArenaBytes at once)
    const blocks = Array.from({ length: 20 }, () => a.alloc(100 * KiB, 'remote-write'));
    expect(reg.count('allocate')).toBe(registered);
    for (const b of blocks) b.release();
    expect(a.stats().arenas.every((s) => s.pinned)).toBe(true);
    expect(reg.liveBytes).toBe(3 * MiB);
    a.reserve(1 * MiB, 'remote-write'); // already free: nothing to do
    expect(reg.count('allocate')).toBe(registered);
    expect(a.trim()).toBe(3 * MiB);
    expect(reg.liveBytes).toBe(0);
    expectCode(() => a.reserve(-1), 'ERR_ALLOC_INVALID_ARG');
  });

  it('reserve() past the limit throws ERR_ALLOC_LIMIT', () => {
    const { a } = setup({ arenaBytes: 1 * MiB, maxRegisteredBytes: 2 * MiB });
    expectCode(() => a.reserve(3 * MiB), 'ERR_ALLOC_LIMIT');
    expect(a.stats().registeredBytes).toBeLessThanOrEqual(2 * MiB);
  });
});

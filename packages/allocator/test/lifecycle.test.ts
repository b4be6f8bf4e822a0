import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { expectCode, KiB, MiB, setup } from './helpers.js';

describe('lifecycle', () => {
  it('close() with nothing live deregisters every arena (pinned too) and the cache', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB });
    a.reserve(2 * MiB);
    a.alloc(100).release();
    a.cache.acquire(new ArrayBuffer(64)).release();
    a.close();
    expect(a.state).toBe('closed');
    expect(reg.live.size).toBe(0);
    expect(reg.misuse).toEqual([]);
    expect(a.cache.state).toBe('closed');
    expect(a.stats()).toMatchObject({ state: 'closed', registeredBytes: 0, arenas: [] });
    a.close(); // idempotent
    expect(reg.count('deregister')).toBe(reg.count('allocate') + reg.count('register'));
  });

  it('close() with live blocks never deregisters memory under them: each arena goes with its last block', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB, retainEmptyArenas: 4 });
    const x = a.alloc(600 * KiB); // arena 1
    const y = a.alloc(600 * KiB); // arena 2
    const z = a.alloc(600 * KiB); // arena 3
    z.release(); // arena 3 empty, retained
    a.close();
    expect(a.state).toBe('closing');
    expect(reg.live.size).toBe(2); // the empty arena went at once
    expectCode(() => a.alloc(1), 'ERR_ALLOC_CLOSED');
    expectCode(() => a.reserve(1), 'ERR_ALLOC_CLOSED');
    x.bytes.fill(1); // still usable: a send may be in flight
    expect(reg.regionOf(x.addr, x.length)).toBeDefined();
    x.release();
    expect(reg.live.size).toBe(1);
    expect(reg.regionOf(y.addr, y.length)).toBeDefined();
    y.release();
    expect(a.state).toBe('closed');
    expect(reg.live.size).toBe(0);
    expect(reg.misuse).toEqual([]);
  });

  it('destroy() deregisters everything now; live blocks become unusable and their release harmless', () => {
    const { a, reg } = setup({ arenaBytes: 1 * MiB, maxArenaBytes: 1 * MiB });
    const small = a.alloc(10);
    const large = a.alloc(100 * KiB);
    const dedicated = a.alloc(2 * MiB);
    const pinned = a.cache.acquire(new ArrayBuffer(64));
    a.destroy();
    expect(a.state).toBe('closed');
    expect(reg.live.size).toBe(0);
    for (const b of [small, large, dedicated]) {
      expect(b.state).toBe('revoked');
      expectCode(() => b.bytes, 'ERR_ALLOC_CLOSED');
      expectCode(() => b.sge(), 'ERR_ALLOC_CLOSED');
      b.release();
    }
    expectCode(() => pinned.lkey, 'ERR_ALLOC_CLOSED');
    expect(a.stats()).toMatchObject({ liveBlocks: 0, inUseBytes: 0, registeredBytes: 0 });
    expect(a.leakReport().liveBlocks).toBe(0);
    a.destroy(); // idempotent
    a.close();
    expect(reg.misuse).toEqual([]);
  });

  it('destroy() during closing finishes the close at once', () => {
    const { a, reg } = setup();
    const b = a.alloc(10);
    a.close();
    expect(a.state).toBe('closing');
    a.destroy();
    expect(a.state).toBe('closed');
    expect(b.state).toBe('revoked');
    expect(reg.live.size).toBe(0);
  });

  it('Symbol.dispose and Symbol.asyncDispose close it', async () => {
    const { a, reg } = setup();
    a.alloc(10).release();
    a[Symbol.dispose]();
    expect(a.state).toBe('closed');
    const second = setup();
    second.a.alloc(10).release();
    await second.a[Symbol.asyncDispose]();
    expect(second.a.state).toBe('closed');
    expect(reg.live.size + second.reg.live.size).toBe(0);
  });

  it('trim() after close does nothing, stats() and leakReport() keep working', () => {
    const { a } = setup();
    a.close();
    expect(a.trim()).toBe(0);
    expect(a.leakReport()).toEqual({ liveBlocks: 0, inUseBytes: 0, blocks: [] });
    expect(a.stats().state).toBe('closed');
  });

  it('closed and dropped allocators, their arenas and blocks are garbage-collected', () => {
    const script = fileURLToPath(new URL('./fixtures/gc-check.ts', import.meta.url));
    const out = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', script], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    const collected = JSON.parse(out) as string[];
    for (const tag of ['closed', 'dropped']) {
      for (const what of ['allocator', 'arena', 'block'])
        expect(collected).toContain(`${tag}:${what}`);
    }
  });
});

import { describe, expect, it } from 'vitest';
import {
  Access,
  fromProtectionDomain,
  type MemoryRegionLike,
  type ProtectionDomainLike,
  verbsRegistrar,
} from '../src/index.js';
import { expectCode, MiB } from './helpers.js';

/**
 * A stand-in with the shape of verbs' ProtectionDomain / MemoryRegion (packages/verbs/API.md):
 * `bytes` throws after deregistration, as the real MemoryRegion does.
 */
class FakeMr implements MemoryRegionLike {
  readonly addr: number;
  readonly length: number;
  readonly lkey: number;
  readonly rkey: number;
  readonly access: number;
  readonly #bytes: Uint8Array;
  deregistered = 0;

  constructor(bytes: Uint8Array, addr: number, key: number, access: number) {
    this.#bytes = bytes;
    this.addr = addr;
    this.length = bytes.byteLength;
    this.lkey = key;
    this.rkey = key;
    this.access = access;
  }

  get bytes(): Uint8Array {
    if (this.deregistered > 0) throw new Error('ERR_RDMA_MR_INVALID');
    return this.#bytes;
  }

  deregister(): void {
    this.deregistered++;
  }
}

class FakePd implements ProtectionDomainLike {
  readonly mrs: Array<{ via: 'allocMr' | 'regMr'; mr: FakeMr }> = [];
  #addr = 0x7f00_0000_0000;
  #key = 1;

  allocMr(length: number, access: number): FakeMr {
    const mr = new FakeMr(new Uint8Array(length), this.#addr, this.#key++, access);
    this.#addr += length + 4096;
    this.mrs.push({ via: 'allocMr', mr });
    return mr;
  }

  regMr(buffer: Uint8Array, access: number): FakeMr {
    const mr = new FakeMr(buffer, 0x5500_0000_0000 + buffer.byteOffset, this.#key++, access);
    this.mrs.push({ via: 'regMr', mr });
    return mr;
  }
}

describe('verbs protection-domain factory', () => {
  it('registers arenas with pd.allocMr and the policy flags; blocks are views of mr.bytes', () => {
    const pd = new FakePd();
    const a = fromProtectionDomain(pd, { arenaBytes: 1 * MiB });
    const b = a.alloc(4000, 'remote-write');
    expect(pd.mrs).toHaveLength(1);
    const [{ via, mr }] = pd.mrs as [{ via: string; mr: FakeMr }];
    expect(via).toBe('allocMr');
    expect(mr.length).toBe(1 * MiB);
    expect(mr.access).toBe(Access.LocalWrite | Access.RemoteWrite);
    expect(b.bytes.buffer).toBe(mr.bytes.buffer);
    expect(b.addr - mr.addr).toBe(b.bytes.byteOffset - mr.bytes.byteOffset);
    expect(b.rkey).toBe(mr.rkey);
    b.release();
    a.close();
    expect(mr.deregistered).toBe(1);
  });

  it('registers application buffers in place with pd.regMr through the cache', () => {
    const pd = new FakePd();
    const a = fromProtectionDomain(pd);
    const data = new Float64Array(512);
    const r = a.cache.acquire(data, 'remote-read');
    const [{ via, mr }] = pd.mrs as [{ via: string; mr: FakeMr }];
    expect(via).toBe('regMr');
    expect(mr.access).toBe(Access.LocalWrite | Access.RemoteRead);
    expect(r.bytes.buffer).toBe(data.buffer);
    expect(r.lkey).toBe(mr.lkey);
    r.release();
    a.close();
    expect(mr.deregistered).toBe(1);
  });

  it('deregisters every MR exactly once and never reads one after deregistering it', () => {
    const pd = new FakePd();
    const a = fromProtectionDomain(pd, {
      arenaBytes: 1 * MiB,
      maxArenaBytes: 1 * MiB,
      retainEmptyArenas: 0,
    });
    const blocks = [a.alloc(10), a.alloc(600_000), a.alloc(900_000), a.alloc(3 * MiB)];
    a.cache.acquire(new ArrayBuffer(100)).release();
    for (const b of blocks) b.release();
    a.close();
    expect(pd.mrs.map((m) => m.via)).toEqual(['allocMr', 'allocMr', 'allocMr', 'regMr']);
    expect(pd.mrs.map((m) => m.mr.deregistered)).toEqual(pd.mrs.map(() => 1));
    expectCode(() => a.alloc(1), 'ERR_ALLOC_CLOSED');
  });

  it('verbsRegistrar exposes the same pair, for timing per-message registration in a bench', () => {
    const pd = new FakePd();
    const r = verbsRegistrar(pd);
    const mr = r.allocate?.(4096, Access.LocalWrite);
    expect(mr).toBe(pd.mrs[0]?.mr);
    if (mr !== undefined) r.deregister(mr);
    expect(pd.mrs[0]?.mr.deregistered).toBe(1);
  });
});

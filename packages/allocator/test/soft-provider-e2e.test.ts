// End to end with the soft verbs provider: blocks are filled in place by the application
// and sent by RDMA WRITE and SEND without a copy on the JS side; the peer reads its own blocks.
import {
  allocCompletions,
  type CompletionQueue,
  openDevice,
  type WorkCompletion,
} from '@rdmajs/verbs';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type MemoryRegionLike,
  RegisteredAllocator,
  type Registrar,
  verbsRegistrar,
} from '../src/index.js';

async function collect(cq: CompletionQueue, n: number): Promise<WorkCompletion[]> {
  const out: WorkCompletion[] = [];
  const wcs = allocCompletions(8);
  while (out.length < n) {
    await cq.waitForCompletion({ timeoutMs: 5000 });
    const got = cq.poll(wcs);
    for (let i = 0; i < got; i++) out.push({ ...(wcs[i] as WorkCompletion) });
  }
  return out;
}

function host() {
  const dev = openDevice({ provider: 'soft' });
  const pd = dev.allocPd();
  const cq = dev.createCq({ capacity: 64 });
  const qp = pd.createQp({ sendCq: cq, recvCq: cq });
  // Record what the allocator registers, to check blocks are views of it.
  const regions: MemoryRegionLike[] = [];
  const inner = verbsRegistrar(pd);
  const registrar: Registrar<MemoryRegionLike> = {
    allocate: (length, access) => {
      const r = inner.allocate?.(length, access) as MemoryRegionLike;
      regions.push(r);
      return r;
    },
    register: (bytes, access) => {
      const r = inner.register(bytes, access);
      regions.push(r);
      return r;
    },
    deregister: (r) => inner.deregister(r),
  };
  const allocator = new RegisteredAllocator({ arenaBytes: 1 << 20, registrar });
  return { dev, pd, cq, qp, allocator, regions };
}

type Host = ReturnType<typeof host>;

/** The block's bytes are the registered memory itself, at its address. */
function expectZeroCopy(h: Host, b: { bytes: Uint8Array; addr: number; lkey: number }) {
  const region = h.regions.find((r) => r.bytes.buffer === b.bytes.buffer);
  expect(region).toBeDefined();
  expect(b.lkey).toBe(region?.lkey);
  expect(region && b.bytes.byteOffset - region.bytes.byteOffset).toBe(b.addr - (region?.addr ?? 0));
}

describe('allocator blocks over the soft provider', () => {
  const hosts: Host[] = [];
  afterEach(() => {
    for (const h of hosts.splice(0)) {
      h.allocator.close();
      h.dev.close();
    }
  });

  function connectedPair(): [Host, Host] {
    const a = host();
    const b = host();
    hosts.push(a, b);
    a.qp.connect(b.qp.endpoint());
    b.qp.connect(a.qp.endpoint());
    return [a, b];
  }

  it('RDMA WRITE from a filled block lands in the peer block, read in place', async () => {
    const [a, b] = connectedPair();
    const src = a.allocator.alloc(3000);
    const dst = b.allocator.alloc(3000, 'remote-write');
    expectZeroCopy(a, src);
    expectZeroCopy(b, dst);
    for (let i = 0; i < 3000; i++) src.bytes[i] = i & 0xff;
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [src.sge()],
      remoteAddr: dst.addr,
      rkey: dst.rkey,
    });
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    expect(dst.bytes.every((v, i) => v === (i & 0xff))).toBe(true);
  });

  it('SEND gathers slices of blocks into a block the peer posted', async () => {
    const [a, b] = connectedPair();
    const header = a.allocator.alloc(16);
    const body = a.allocator.alloc(10_000);
    header.bytes.fill(7);
    body.bytes.fill(9);
    const inbox = b.allocator.alloc(20_000);
    b.qp.postRecv({ wrId: 5, sgList: [inbox.sge()] });
    a.qp.postSend({
      wrId: 2,
      opcode: 'SEND',
      sgList: [header.sge(0, 16), body.slice(100, 5000).sge()],
    });
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    const [r] = await collect(b.cq, 1);
    expect(r).toMatchObject({ wrId: 5, status: 'SUCCESS', byteLen: 5016 });
    expect(inbox.bytes.subarray(0, 16).every((v) => v === 7)).toBe(true);
    expect(inbox.bytes.subarray(16, 5016).every((v) => v === 9)).toBe(true);
  });

  it('an application buffer registered through the cache is sent without a copy', async () => {
    const [a, b] = connectedPair();
    const appBuffer = new Uint8Array(8192).fill(0x42);
    const reg = a.allocator.cache.acquire(appBuffer);
    expect(reg.bytes.buffer).toBe(appBuffer.buffer);
    const dst = b.allocator.alloc(8192, 'remote-write');
    a.qp.postSend({
      wrId: 3,
      opcode: 'RDMA_WRITE',
      sgList: [reg.sge()],
      remoteAddr: dst.addr,
      rkey: dst.rkey,
    });
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    expect(dst.bytes.every((v) => v === 0x42)).toBe(true);
    // The second use hits the cache: no new registration.
    const before = a.regions.length;
    a.allocator.cache.acquire(appBuffer).release();
    expect(a.regions.length).toBe(before);
    reg.release();
  });

  it('a local-only block cannot be written by the peer', async () => {
    const [a, b] = connectedPair();
    const src = a.allocator.alloc(64);
    const privateBlock = b.allocator.alloc(64, 'local');
    a.qp.postSend({
      wrId: 4,
      opcode: 'RDMA_WRITE',
      sgList: [src.sge()],
      remoteAddr: privateBlock.addr,
      rkey: privateBlock.rkey,
    });
    expect((await collect(a.cq, 1))[0]?.status).toBe('REM_ACCESS_ERR');
  });
});

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

  /**
   * A peer's RDMA READ of `length` bytes at `addr` of `target` with `rkey`, over a fresh QP
   * pair (a failed READ moves its QP to the error state): the completion status.
   */
  async function peerRead(target: Host, addr: number, rkey: number, length: number) {
    const peer = host();
    hosts.push(peer);
    const qp = target.pd.createQp({ sendCq: target.cq, recvCq: target.cq });
    qp.connect(peer.qp.endpoint());
    peer.qp.connect(qp.endpoint());
    const dst = peer.allocator.alloc(length);
    peer.qp.postSend({ wrId: 9, opcode: 'RDMA_READ', sgList: [dst.sge()], remoteAddr: addr, rkey });
    return (await collect(peer.cq, 1))[0]?.status;
  }

  it('a peer pool’s key reaches its own arena only, not the shared arena nor another pool', async () => {
    const a = host();
    hosts.push(a);
    const mine = a.allocator.forPeer({ label: 'peer' });
    const theirs = a.allocator.forPeer({ label: 'other peer' });
    const block = mine.alloc(4 * 1024, 'remote-read');
    const shared = a.allocator.alloc(4 * 1024, 'remote-read'); // e.g. messages for others
    const other = theirs.alloc(4 * 1024, 'remote-read');
    expectZeroCopy(a, block);
    expect(await peerRead(a, block.addr, block.rkey, 4096)).toBe('SUCCESS');
    // Past the block, inside the pool's arena: memory of this peer's pool, reachable.
    expect(await peerRead(a, block.addr + 4096, block.rkey, 4096)).toBe('SUCCESS');
    // With the shared allocator, one block's key reads its neighbours: the exposure pools end.
    const neighbour = a.allocator.alloc(4 * 1024, 'remote-read');
    expect(await peerRead(a, neighbour.addr, shared.rkey, 64)).toBe('SUCCESS');
    // The pool's key does not open the owner's arena nor another pool's.
    expect(await peerRead(a, shared.addr, block.rkey, 64)).toBe('REM_ACCESS_ERR');
    expect(await peerRead(a, other.addr, block.rkey, 64)).toBe('REM_ACCESS_ERR');
    // Nor anything past the pool's arena (1 MiB here).
    const arena = mine.stats().arenas[0];
    expect(arena?.bytes).toBe(1 << 20);
    const end = (arena?.addr ?? 0) + (arena?.bytes ?? 0);
    expect(await peerRead(a, end - 64, block.rkey, 64)).toBe('SUCCESS');
    expect(await peerRead(a, end - 32, block.rkey, 64)).toBe('REM_ACCESS_ERR');
    for (const b of [block, shared, other, neighbour]) b.release();
  });

  it('a cached application buffer exposes only the pages around the acquired view', async () => {
    const a = host();
    hosts.push(a);
    const app = new Uint8Array(64 * 1024).fill(7);
    const view = a.allocator.cache.acquire(app.subarray(20_000, 20_100), 'remote-read');
    const page = 20_000 - (20_000 % 4096);
    const start = view.addr - (20_000 - page);
    expect(await peerRead(a, view.addr, view.rkey, 100)).toBe('SUCCESS');
    expect(await peerRead(a, start, view.rkey, 4096)).toBe('SUCCESS');
    expect(await peerRead(a, start - 1, view.rkey, 1)).toBe('REM_ACCESS_ERR');
    expect(await peerRead(a, start + 4096, view.rkey, 1)).toBe('REM_ACCESS_ERR');
    view.release();
  });
});

// Regression tests for the sec10 review's H2 and L4: what a peer holding the secret can reach
// of our registered memory. The peer is hand-rolled (test/support/roguePeer.ts).
import type { Block } from '@rdmajs/allocator';
import { afterEach, expect, it } from 'vitest';
import { type RdmaConnection, RdmaTransport } from '../src/index.js';
import {
  decodeRendezvousNotice,
  RENDEZVOUS_NOTICE_BYTES,
  type RendezvousNotice,
} from '../src/internal/RendezvousNotice.js';
import { WIRE_HEADER_BYTES, WireType } from '../src/internal/WireHeader.js';
import { type RoguePeer, roguePeer } from './support/roguePeer.js';

const SECRET = 'memory exposure test secret, 32+ bytes';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Blocks = readonly Block[] | ((conn: RdmaConnection) => readonly Block[]);

/**
 * A server that sends `blocks` (or the blocks `blocks(conn)` makes for each connection) on
 * the first channel each rogue peer opens; `connect()` brings one more rogue peer.
 */
async function serve(server: RdmaTransport, blocks: Blocks): Promise<() => Promise<RoguePeer>> {
  const listener = await server.listen({ secret: SECRET });
  cleanups.push(async () => {
    await listener.close();
    server.close();
  });
  listener.on('connection', (c) => {
    const conn = c as RdmaConnection;
    conn.on('error', () => {});
    cleanups.push(() => conn.destroy());
    conn.on('channel', (ch) => {
      for (const b of typeof blocks === 'function' ? blocks(conn) : blocks) {
        ch.send(b).catch(() => {});
      }
    });
  });
  return async () => {
    const rogue = await roguePeer(listener.port, SECRET);
    cleanups.push(() => rogue.close());
    await rogue.open(1);
    return rogue;
  };
}

/** A server that sends `blocks` on the first channel the rogue peer opens. */
async function offer(server: RdmaTransport, blocks: Blocks): Promise<RoguePeer> {
  return (await serve(server, blocks))();
}

/** The rogue's RDMA READ of `length` bytes at `addr` with `rkey`: its completion. */
async function peerRead(
  rogue: RoguePeer,
  wrId: number,
  addr: number | bigint,
  rkey: number,
  length: number,
) {
  const dst = rogue.alloc.alloc(length);
  cleanups.push(() => dst.release());
  qp0(rogue).postSend({
    wrId,
    opcode: 'RDMA_READ',
    sgList: [dst.sge(0, length)],
    remoteAddr: Number(addr),
    rkey,
  });
  const wc = await rogue.next();
  expect(wc.wrId).toBe(wrId);
  return { status: wc.status, bytes: dst.bytes };
}

async function readyNotice(rogue: RoguePeer): Promise<RendezvousNotice> {
  const wc = await rogue.next();
  expect(wc.opcode).toBe('RECV');
  const pool = rogue.resources.pool;
  const buf = pool.block(pool.take(wc.wrId));
  expect(buf.bytes[0]).toBe(WireType.Ready);
  return decodeRendezvousNotice(
    buf.bytes.subarray(WIRE_HEADER_BYTES, WIRE_HEADER_BYTES + RENDEZVOUS_NOTICE_BYTES),
    { eagerThreshold: 8192, maxMessageBytes: 16 << 20 },
  );
}

function qp0(rogue: RoguePeer) {
  const qp = rogue.resources.qps[0];
  if (qp === undefined) throw new Error('no qp');
  return qp;
}

it('blocks of the shared transport allocator go out as copies: their arena keys never reach the peer', async () => {
  const server = new RdmaTransport();
  const rw = server.allocator.alloc(64 * 1024, 'remote-read-write');
  const ro = server.allocator.alloc(64 * 1024, 'remote-read');
  rw.bytes.fill(0x5a);
  ro.bytes.fill(0x33);
  const rogue = await offer(server, [rw, ro]);
  let last: RendezvousNotice | undefined;
  for (const b of [rw, ro]) {
    last = await readyNotice(rogue);
    expect(last.length).toBe(64 * 1024);
    expect(last.addr).not.toBe(BigInt(b.addr));
    expect(last.rkey).not.toBe(b.rkey);
  }
  const copy = last as RendezvousNotice;
  // The copy holds what was sent; its key does not open the shared arena.
  const read = await peerRead(rogue, 6, copy.addr, copy.rkey, 16);
  expect(read.status).toBe('SUCCESS');
  expect(read.bytes[0]).toBe(0x33);
  expect((await peerRead(rogue, 7, ro.addr, copy.rkey, 16)).status).toBe('REM_ACCESS_ERR');
});

it('a remote-read block of connection.allocator goes out in place; its key reaches that pool only', async () => {
  const server = new RdmaTransport();
  // Another peer's message in the shared allocator, and blocks built in each peer's pool.
  const shared = server.allocator.alloc(64 * 1024, 'remote-read');
  shared.bytes.fill(0x11);
  const offered: Block[] = [];
  const connect = await serve(server, (conn) => {
    const b = conn.allocator.alloc(64 * 1024, 'remote-read');
    b.bytes.fill(0x40 + offered.length);
    offered.push(b);
    // The second connection is also handed the first one's block: it must get a copy.
    return offered.length === 1 ? [b] : [b, offered[0] as Block];
  });
  const first = await connect();
  const n1 = await readyNotice(first);
  const second = await connect();
  const n2 = await readyNotice(second);
  const [b1, b2] = offered as [Block, Block];
  const foreign = await readyNotice(second);
  expect(foreign.addr).not.toBe(BigInt(b1.addr));
  expect(foreign.rkey).not.toBe(b1.rkey);
  expect(foreign.rkey).toBe(b2.rkey); // the copy is in the second connection's pool
  // zero-copy: the application's own blocks, with their pools' keys
  expect([n1.addr, n1.rkey]).toEqual([BigInt(b1.addr), b1.rkey]);
  expect([n2.addr, n2.rkey]).toEqual([BigInt(b2.addr), b2.rkey]);
  expect(n1.rkey).not.toBe(n2.rkey);
  expect(n1.rkey).not.toBe(shared.rkey);
  // The peer reads its block, and its pool past the block (memory meant for it) ...
  const own = await peerRead(first, 1, n1.addr, n1.rkey, 64);
  expect(own.status).toBe('SUCCESS');
  expect(own.bytes[0]).toBe(0x40);
  expect((await peerRead(first, 2, n1.addr + BigInt(64 * 1024), n1.rkey, 64)).status).toBe(
    'SUCCESS',
  );
  // ... but neither the other peer's block nor the shared arena, where the shared
  // allocator's key would have reached.
  expect((await peerRead(first, 3, b2.addr, n1.rkey, 64)).status).toBe('REM_ACCESS_ERR');
  expect((await peerRead(second, 4, shared.addr, n2.rkey, 64)).status).toBe('REM_ACCESS_ERR');
  shared.release();
});

it('the QPs mux connects refuse a remote WRITE even with a valid remote-write key', async () => {
  const server = new RdmaTransport();
  const rw = server.allocator.alloc(64 * 1024, 'remote-read-write');
  rw.bytes.fill(0x5a);
  // Nothing is offered: the test hands the rogue the key itself (as if it had leaked).
  const rogue = await offer(server, []);
  const src = rogue.alloc.alloc(16);
  src.bytes.fill(0xee);
  // READ is what mux needs and is allowed (the MR grants it too).
  qp0(rogue).postSend({
    wrId: 8,
    opcode: 'RDMA_READ',
    sgList: [src.sge(0, 16)],
    remoteAddr: rw.addr,
    rkey: rw.rkey,
  });
  let wc = await rogue.next();
  expect(wc.status).toBe('SUCCESS');
  expect(src.bytes[0]).toBe(0x5a);
  src.bytes.fill(0xee);
  qp0(rogue).postSend({
    wrId: 9,
    opcode: 'RDMA_WRITE',
    sgList: [src.sge(0, 16)],
    remoteAddr: rw.addr,
    rkey: rw.rkey,
  });
  wc = await rogue.next();
  expect(wc.wrId).toBe(9);
  // Refused by the QP's access flags (IB: an opcode the QP does not enable is an invalid request).
  expect(wc.status).toBe('REM_INV_REQ_ERR');
  expect(rw.bytes.every((x) => x === 0x5a)).toBe(true);
});

// Regression tests for the sec10 review's H2 (in part) and L4: what a peer holding the secret
// can reach of our registered memory. The peer is hand-rolled (test/support/roguePeer.ts).
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

/** A server that sends `blocks` on the first channel the rogue peer opens. */
async function offer(server: RdmaTransport, blocks: readonly Block[]): Promise<RoguePeer> {
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
      for (const b of blocks) ch.send(b).catch(() => {});
    });
  });
  const rogue = await roguePeer(listener.port, SECRET);
  cleanups.push(() => rogue.close());
  await rogue.open(1);
  return rogue;
}

async function readyNotice(rogue: RoguePeer): Promise<RendezvousNotice> {
  const wc = await rogue.next();
  expect(wc.opcode).toBe('RECV');
  const buf = rogue.resources.recvBlocks[wc.wrId];
  if (buf === undefined) throw new Error('no receive buffer');
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

it('a remote-read-write block goes out as a copy: its arena key never reaches the peer', async () => {
  const server = new RdmaTransport();
  const rw = server.allocator.alloc(64 * 1024, 'remote-read-write');
  const ro = server.allocator.alloc(64 * 1024, 'remote-read');
  rw.bytes.fill(0x5a);
  ro.bytes.fill(0x33);
  const rogue = await offer(server, [rw, ro]);
  const copied = await readyNotice(rogue);
  expect(copied.length).toBe(64 * 1024);
  expect(copied.addr).not.toBe(BigInt(rw.addr));
  expect(copied.rkey).not.toBe(rw.rkey);
  // The documented remaining exposure: a remote-read block of the shared allocator goes out
  // in place, with the key of its (shared) arena.
  const inPlace = await readyNotice(rogue);
  expect(inPlace.addr).toBe(BigInt(ro.addr));
  expect(inPlace.rkey).toBe(ro.rkey);
  // The key the copy came with does not open the application's remote-read-write block.
  const dst = rogue.alloc.alloc(16);
  qp0(rogue).postSend({
    wrId: 7,
    opcode: 'RDMA_READ',
    sgList: [dst.sge(0, 16)],
    remoteAddr: rw.addr,
    rkey: copied.rkey,
  });
  const wc = await rogue.next();
  expect(wc.wrId).toBe(7);
  expect(wc.status).toBe('REM_ACCESS_ERR');
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

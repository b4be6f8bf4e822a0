// Issue 10, the soft TCP link with several WRs of a QP in flight: answers complete them in
// send-queue order, a WR that is not run (RNR, transport) rewinds the window to it without
// anything behind it taking effect early or twice, one large WRITE does not time out the
// small WRs of another QP on the same connection, and a peer killed mid-window still ends
// in RETRY_EXC_ERR then flushes.
import { afterEach, describe, expect, it } from 'vitest';
import { Access, type Endpoint, openDevice, type QueuePair, type SendWr } from '../src/index.js';
import { type ChildPeer, spawnPeer } from './harness/child.js';
import {
  collect,
  linkPair,
  type Pair,
  providers,
  type Side,
  sideOn,
  sleep,
} from './harness/pair.js';

const EVERY = Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic;

describe.runIf(providers.includes('soft'))('the soft TCP link, pipelined', () => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  const word = (bytes: Uint8Array, off: number) =>
    new BigUint64Array(bytes.buffer, bytes.byteOffset + off, 1);

  it('a window of mixed WRs (SEND, WRITE, READ, atomics) completes in posting order', async () => {
    p = await linkPair({ mrAccess: EVERY, maxSendWr: 256, maxRecvWr: 256, cqCapacity: 1024 });
    const { a, b } = p;
    const n = 200;
    for (let i = 0; i < n; i++) a.mr.bytes[1024 + i] = i & 0xff;
    b.qp.postRecv(
      Array.from({ length: n }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(8192 + i * 8, 8)] })),
    );
    const wrs: SendWr[] = [];
    for (let i = 0; i < n; i++) {
      const k = i % 4;
      if (k === 0) wrs.push({ wrId: i, opcode: 'SEND', sgList: [a.mr.sge(1024 + i, 1)] });
      else if (k === 1)
        wrs.push({
          wrId: i,
          opcode: 'RDMA_WRITE',
          sgList: [a.mr.sge(1024 + i, 1)],
          remoteAddr: b.mr.addr + 4096 + i,
          rkey: b.mr.rkey,
        });
      else if (k === 2)
        wrs.push({
          wrId: i,
          opcode: 'ATOMIC_FETCH_AND_ADD',
          compareAdd: 1n,
          sgList: [a.mr.sge(16384 + i * 8, 8)],
          remoteAddr: b.mr.addr + 64,
          rkey: b.mr.rkey,
        });
      // A READ of the byte the WRITE just before it wrote: visible only if run in order.
      else
        wrs.push({
          wrId: i,
          opcode: 'RDMA_READ',
          sgList: [a.mr.sge(32768 + i, 1)],
          remoteAddr: b.mr.addr + 4096 + i - 2,
          rkey: b.mr.rkey,
        });
    }
    // Posted in batches that stay within the send queue; the window keeps several on the wire.
    for (let i = 0; i < n; i += 100) a.qp.postSend(wrs.slice(i, i + 100));
    const wcs = await collect(a.cq, n, 20_000);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual(wrs.map((w) => [w.wrId, 'SUCCESS']));
    const recvs = await collect(b.cq, n / 4, 20_000);
    expect(recvs.map((w) => w.wrId)).toEqual(Array.from({ length: n / 4 }, (_, i) => i));
    for (let i = 0; i < n; i++) {
      const k = i % 4;
      if (k === 0) expect(b.mr.bytes[8192 + (i / 4) * 8]).toBe(i & 0xff);
      if (k === 1) expect(b.mr.bytes[4096 + i]).toBe(i & 0xff);
      // Each fetch-add ran once, in order: its prior value is the count before it.
      if (k === 2) expect(word(a.mr.bytes, 16384 + i * 8)[0]).toBe(BigInt((i - 2) / 4));
      if (k === 3) expect(a.mr.bytes[32768 + i]).toBe((i - 2) & 0xff);
    }
    expect(word(b.mr.bytes, 64)[0]).toBe(BigInt(n / 4));
  });

  it('RNR in the middle of a window: nothing behind it runs early, nothing twice, nothing skipped', async () => {
    p = await linkPair({ mrAccess: EVERY }, { a: { rnrRetry: 7 }, b: { minRnrTimer: 1 } });
    const { a, b } = p;
    a.mr.bytes.fill(0xaa, 0, 8);
    a.mr.bytes.fill(0xbb, 8, 16);
    a.mr.bytes.fill(0xcc, 16, 24);
    a.mr.bytes.fill(0x11, 100, 108);
    a.mr.bytes.fill(0x22, 108, 116);
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(1000, 8)] });
    const fadd = (wrId: number): SendWr => ({
      wrId,
      opcode: 'ATOMIC_FETCH_AND_ADD',
      compareAdd: 1n,
      sgList: [a.mr.sge(512 + wrId * 8, 8)],
      remoteAddr: b.mr.addr + 64,
      rkey: b.mr.rkey,
    });
    const write = (wrId: number, from: number, to: number): SendWr => ({
      wrId,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(from, 8)],
      remoteAddr: b.mr.addr + to,
      rkey: b.mr.rkey,
    });
    const wrs: SendWr[] = [
      fadd(0),
      { wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] },
      fadd(2),
      write(3, 100, 2000),
      { wrId: 4, opcode: 'SEND', sgList: [a.mr.sge(8, 8)] }, // no receive posted: RNR
      fadd(5),
      write(6, 108, 3000),
      { wrId: 7, opcode: 'SEND', sgList: [a.mr.sge(16, 8)] },
      fadd(8),
    ];
    a.qp.postSend(wrs);
    const first = await collect(a.cq, 4);
    expect(first.map((w) => [w.wrId, w.status])).toEqual([
      [0, 'SUCCESS'],
      [1, 'SUCCESS'],
      [2, 'SUCCESS'],
      [3, 'SUCCESS'],
    ]);
    // While SEND 4 waits for a receive, what was sent behind it has not taken effect.
    await sleep(50);
    expect(a.cq.pending()).toBe(0);
    expect(word(b.mr.bytes, 64)[0]).toBe(2n);
    expect([...b.mr.bytes.subarray(3000, 3008)]).toEqual(new Array(8).fill(0));
    b.qp.postRecv([
      { wrId: 2, sgList: [b.mr.sge(1008, 8)] },
      { wrId: 3, sgList: [b.mr.sge(1016, 8)] },
    ]);
    const rest = await collect(a.cq, 5);
    expect(rest.map((w) => [w.wrId, w.status])).toEqual([
      [4, 'SUCCESS'],
      [5, 'SUCCESS'],
      [6, 'SUCCESS'],
      [7, 'SUCCESS'],
      [8, 'SUCCESS'],
    ]);
    // Every fetch-add once, in posting order.
    expect([0, 2, 5, 8].map((i) => word(a.mr.bytes, 512 + i * 8)[0])).toEqual([0n, 1n, 2n, 3n]);
    expect(word(b.mr.bytes, 64)[0]).toBe(4n);
    const recvs = await collect(b.cq, 3);
    expect(recvs.map((w) => [w.wrId, w.byteLen])).toEqual([
      [1, 8],
      [2, 8],
      [3, 8],
    ]);
    expect([...b.mr.bytes.subarray(1000, 1024)]).toEqual([
      ...new Array(8).fill(0xaa),
      ...new Array(8).fill(0xbb),
      ...new Array(8).fill(0xcc),
    ]);
    expect([...b.mr.bytes.subarray(2000, 2008)]).toEqual(new Array(8).fill(0x11));
    expect([...b.mr.bytes.subarray(3000, 3008)]).toEqual(new Array(8).fill(0x22));
  });

  it('a 64 MiB WRITE beside small SENDs on another QP of the same peer: nothing times out (default timeouts)', async () => {
    const big = 64 << 20;
    p = await linkPair({ mrBytes: big + 4096 });
    const { a, b } = p;
    for (let i = 0; i < big; i += 4096) a.mr.bytes[i] = (i >>> 12) & 0xff;
    a.mr.bytes[big - 1] = 0x5a;
    // A second QP pair between the same two devices: its frames share the connection.
    const qp = (s: Side): QueuePair =>
      s.pd.createQp({
        sendCq: s.cq,
        recvCq: s.cq,
        maxSendWr: 64,
        maxRecvWr: 64,
        maxSendSge: 1,
        maxRecvSge: 1,
      });
    const a2 = qp(a);
    const b2 = qp(b);
    a2.connect(b2.endpoint());
    b2.connect(a2.endpoint());
    const small = 40;
    b2.postRecv(
      Array.from({ length: small }, (_, i) => ({
        wrId: 100 + i,
        sgList: [b.mr.sge(big + i * 8, 8)],
      })),
    );
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, big)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
    });
    a2.postSend(
      Array.from(
        { length: small },
        (_, i): SendWr => ({ wrId: 100 + i, opcode: 'SEND', sgList: [a.mr.sge(i, 8)] }),
      ),
    );
    const wcs = await collect(a.cq, small + 1, 60_000);
    expect(
      wcs.filter((w) => w.status !== 'SUCCESS').map((w) => [w.qpNum === a2.qpn, w.wrId, w.status]),
    ).toEqual([]);
    expect(wcs.filter((w) => w.qpNum === a2.qpn).map((w) => w.wrId)).toEqual(
      Array.from({ length: small }, (_, i) => 100 + i),
    );
    expect(wcs.filter((w) => w.qpNum === a.qp.qpn).map((w) => w.wrId)).toEqual([1]);
    expect(Buffer.compare(b.mr.bytes.subarray(0, big), a.mr.bytes.subarray(0, big))).toBe(0);
    expect((await collect(b.cq, small, 60_000)).map((w) => w.wrId)).toEqual(
      Array.from({ length: small }, (_, i) => 100 + i),
    );
  });

  describe('a peer killed mid-window', () => {
    let peer: ChildPeer | undefined;
    let me: Side | undefined;
    afterEach(async () => {
      await peer?.kill();
      me?.dev.close();
      peer = me = undefined;
    });

    it('the WR at the head fails RETRY_EXC_ERR, the rest of the window flushes', async () => {
      peer = await spawnPeer();
      const dev = openDevice({ provider: 'soft', link: 'tcp' });
      await dev.listen();
      const m = sideOn(dev);
      me = m;
      const remote = await peer.call<{ endpoint: Endpoint }>('setup', {
        provider: 'soft',
        link: 'tcp',
      });
      me.qp.connect(remote.endpoint); // defaults
      await peer.call('connect', { endpoint: me.qp.endpoint() });
      await peer.call('postRecv', { count: 3, length: 64 });
      // Three land; the fourth waits (RNR, retried forever by default) with the rest behind it.
      me.qp.postSend(
        Array.from(
          { length: 12 },
          (_, i): SendWr => ({ wrId: i, opcode: 'SEND', sgList: [m.mr.sge(0, 8)] }),
        ),
      );
      const landed = await collect(me.cq, 3, 10_000);
      expect(landed.map((w) => [w.wrId, w.status])).toEqual([
        [0, 'SUCCESS'],
        [1, 'SUCCESS'],
        [2, 'SUCCESS'],
      ]);
      await peer.kill();
      const wcs = await collect(me.cq, 9, 10_000);
      expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
        [3, 'RETRY_EXC_ERR'],
        ...Array.from({ length: 8 }, (_, i) => [4 + i, 'WR_FLUSH_ERR']),
      ]);
      expect(me.qp.state).toBe('error');
    });
  });
});

// The soft provider's TCP link (peers on other hosts; chosen here with link: 'tcp'):
// the same RC semantics as shared memory, the responder running in the target process.
import { connect, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type Endpoint, openDevice, type SoftEndpoint } from '../src/index.js';
import { LINK_VERSION } from '../src/internal/soft/link/handshake.js';
import { type ChildPeer, spawnPeer } from './harness/child.js';
import {
  collect,
  linkPair,
  type Pair,
  providers,
  type Side,
  side,
  sideOn,
  sleep,
} from './harness/pair.js';

// Soft only: runs when soft is among the providers under test (RDMAJS_TEST_PROVIDERS).
describe.runIf(providers.includes('soft'))('soft provider over the TCP link', () => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  it('carries SEND (gather/scatter, immediate), WRITE, WRITE_WITH_IMM and READ', async () => {
    p = await linkPair();
    const { a, b } = p;
    expect((a.qp.endpoint() as SoftEndpoint).tcp).toMatchObject({ host: '127.0.0.1' });
    a.mr.bytes.set([1, 2, 3], 0);
    a.mr.bytes.set([4, 5], 100);
    b.qp.postRecv([
      { wrId: 1, sgList: [b.mr.sge(0, 2), b.mr.sge(50, 10)] },
      { wrId: 2, sgList: [b.mr.sge(500, 16)] },
    ]);
    a.qp.postSend([
      { wrId: 1, opcode: 'SEND_WITH_IMM', imm: 77, sgList: [a.mr.sge(0, 3), a.mr.sge(100, 2)] },
      {
        wrId: 2,
        opcode: 'RDMA_WRITE',
        sgList: [a.mr.sge(0, 5)],
        remoteAddr: b.mr.addr + 4096,
        rkey: b.mr.rkey,
      },
      {
        wrId: 3,
        opcode: 'RDMA_WRITE_WITH_IMM',
        imm: 9,
        sgList: [a.mr.sge(100, 2)],
        remoteAddr: b.mr.addr + 8192,
        rkey: b.mr.rkey,
      },
    ]);
    b.mr.bytes.fill(6, 12000, 12100);
    a.qp.postSend({
      wrId: 4,
      opcode: 'RDMA_READ',
      sgList: [a.mr.sge(20000, 100)],
      remoteAddr: b.mr.addr + 12000,
      rkey: b.mr.rkey,
    });
    const s = await collect(a.cq, 4);
    expect(s.map((w) => [w.wrId, w.status, w.opcode])).toEqual([
      [1, 'SUCCESS', 'SEND'],
      [2, 'SUCCESS', 'RDMA_WRITE'],
      [3, 'SUCCESS', 'RDMA_WRITE'],
      [4, 'SUCCESS', 'RDMA_READ'],
    ]);
    const r = await collect(b.cq, 2);
    expect(r[0]).toMatchObject({
      wrId: 1,
      opcode: 'RECV',
      byteLen: 5,
      imm: 77,
      withImm: true,
      srcQp: a.qp.qpn,
    });
    expect(r[1]).toMatchObject({ wrId: 2, opcode: 'RECV_RDMA_WITH_IMM', byteLen: 2, imm: 9 });
    expect([...b.mr.bytes.subarray(0, 2), ...b.mr.bytes.subarray(50, 53)]).toEqual([1, 2, 3, 4, 5]);
    expect([...b.mr.bytes.subarray(4096, 4101)]).toEqual([1, 2, 3, 0, 0]);
    expect(a.mr.bytes.subarray(20000, 20100).every((v) => v === 6)).toBe(true);
  });

  it('keeps order: 100 SENDs arrive as posted', async () => {
    p = await linkPair({ maxSendWr: 128, maxRecvWr: 128 });
    const { a, b } = p;
    b.qp.postRecv(
      Array.from({ length: 100 }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(i * 8, 8)] })),
    );
    a.qp.postSend(
      Array.from({ length: 100 }, (_, i) => ({
        wrId: i,
        opcode: 'SEND' as const,
        signaled: i === 99,
        sgList: [a.mr.sge(0, 8)],
      })),
    );
    expect((await collect(b.cq, 100)).map((w) => w.wrId)).toEqual(
      Array.from({ length: 100 }, (_, i) => i),
    );
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
  });

  it('RNR: rnrRetry 0 fails at once; rnrRetry 7 waits for a receive posted later', async () => {
    p = await linkPair({}, { a: { rnrRetry: 0 } });
    p.a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [p.a.mr.sge(0, 8)] });
    expect((await collect(p.a.cq, 1))[0]?.status).toBe('RNR_RETRY_EXC_ERR');
    expect(p.b.qp.state).toBe('rts');
    p.close();
    p = await linkPair({}, { a: { rnrRetry: 7 }, b: { minRnrTimer: 1 } });
    const { a, b } = p;
    a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await sleep(50);
    expect(a.cq.pending()).toBe(0);
    b.qp.postRecv({ wrId: 3, sgList: [b.mr.sge(0, 64)] });
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    expect((await collect(b.cq, 1))[0]).toMatchObject({ wrId: 3, byteLen: 8 });
  });

  it('access and length errors fail both sides as on shared memory', async () => {
    p = await linkPair();
    const { a, b } = p;
    b.qp.postRecv({ wrId: 77, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 8)],
      remoteAddr: b.mr.addr,
      rkey: 0xbad00,
    });
    expect((await collect(a.cq, 1))[0]?.status).toBe('REM_ACCESS_ERR');
    expect((await collect(b.cq, 1))[0]).toMatchObject({ wrId: 77, status: 'WR_FLUSH_ERR' });
    expect([a.qp.state, b.qp.state]).toEqual(['error', 'error']);
    p.close();
    p = await linkPair();
    const q = p;
    q.b.qp.postRecv({ wrId: 5, sgList: [q.b.mr.sge(0, 16)] });
    q.a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [q.a.mr.sge(0, 64)] });
    expect((await collect(q.a.cq, 1))[0]?.status).toBe('REM_OP_ERR');
    expect((await collect(q.b.cq, 1))[0]).toMatchObject({ wrId: 5, status: 'LOC_QP_OP_ERR' });
  });

  it('a peer on another host is reached through the link; without a listener it is unreachable', async () => {
    const a = side('soft');
    const dev = openDevice({ provider: 'soft' });
    const b = sideOn(dev);
    try {
      const foreign = { ...b.qp.endpoint(), bootId: 'another-host' };
      a.qp.toInit();
      expect(() => a.qp.toRtr(foreign)).toThrow(
        expect.objectContaining({ code: 'ERR_RDMA_UNREACHABLE' }),
      );
      await dev.listen();
      a.qp.connect({ ...(b.qp.endpoint() as SoftEndpoint), bootId: 'another-host' });
      b.qp.connect(a.qp.endpoint());
      b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
      a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 10)] });
      expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
      expect((await collect(b.cq, 1))[0]?.byteLen).toBe(10);
    } finally {
      a.dev.close();
      dev.close();
    }
  });

  it('a peer that never answers: the frame times out like a lost packet, then RETRY_EXC_ERR', async () => {
    const silent = createServer((sock) => sock.on('data', () => undefined));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    const port = (silent.address() as { port: number }).port;
    const a = sideOn(openDevice({ provider: 'soft', link: 'tcp' }));
    const b = side('soft');
    try {
      a.qp.connect(
        {
          ...(b.qp.endpoint() as SoftEndpoint),
          tcp: { host: '127.0.0.1', port, key: 'k'.repeat(43), version: LINK_VERSION },
        },
        { timeout: 8, retryCount: 2 },
      );
      a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
      expect((await collect(a.cq, 1))[0]?.status).toBe('RETRY_EXC_ERR');
    } finally {
      a.dev.close();
      b.dev.close();
      silent.close();
    }
  });

  it('a late answer after a resend does not run the WR twice', async () => {
    // ACK timeout ≈ 8 ms, 6 retries (≈ 59 ms in all): the busy-poll below outlasts one
    // timeout, and the sanitizer lane's slower answer still fits in the retries.
    p = await linkPair({}, { a: { timeout: 11, retryCount: 6 } });
    const { a, b } = p;
    b.qp.postRecv([0, 1, 2, 3].map((i) => ({ wrId: 100 + i, sgList: [b.mr.sge(i * 64, 64)] })));
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    // Busy-poll for a while: the frame's deadline passes before the answer is read.
    const until = performance.now() + 20;
    while (performance.now() < until) a.cq.pending();
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    await sleep(30);
    expect((await collect(b.cq, 1)).map((w) => w.wrId)).toEqual([100]);
    expect(b.cq.pending()).toBe(0);
  });

  it('rejects a bad link address before touching the QP', () => {
    const a = side('soft');
    const b = side('soft');
    try {
      a.qp.toInit();
      expect(() =>
        a.qp.toRtr({
          ...b.qp.endpoint(),
          bootId: 'elsewhere',
          tcp: { host: '127.0.0.1', port: 70000 },
        } as never),
      ).toThrow(expect.objectContaining({ code: 'ERR_RDMA_INVALID_ARG' }));
      expect(a.qp.state).toBe('init');
    } finally {
      a.dev.close();
      b.dev.close();
    }
  });

  it('refuses a peer of another link protocol version with ERR_RDMA_LINK_VERSION', () => {
    const a = side('soft');
    const b = side('soft');
    try {
      a.qp.toInit();
      const tcp = { host: '127.0.0.1', port: 9, key: 'k'.repeat(43) };
      for (const bad of [tcp, { ...tcp, version: LINK_VERSION - 1 }]) {
        expect(() =>
          a.qp.toRtr({ ...b.qp.endpoint(), bootId: 'elsewhere', tcp: bad } as never),
        ).toThrow(expect.objectContaining({ code: 'ERR_RDMA_LINK_VERSION' }));
      }
      expect(a.qp.state).toBe('init');
    } finally {
      a.dev.close();
      b.dev.close();
    }
  });

  it('a garbled stream drops that connection; the listener and the process carry on', async () => {
    p = await linkPair();
    const { a, b } = p;
    const addr = (b.qp.endpoint() as SoftEndpoint).tcp as { host: string; port: number };
    const bad = connect(addr.port, addr.host);
    const closed = new Promise<void>((r) => bad.once('close', () => r()));
    bad.on('error', () => undefined);
    bad.resume(); // read, so that the close is seen
    bad.write(Buffer.from([3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff])); // not a handshake
    await closed;
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 4)] });
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
  });

  describe('with a real child process', () => {
    let peer: ChildPeer | undefined;
    let me: Side | undefined;
    afterEach(async () => {
      await peer?.kill();
      me?.dev.close();
      peer = me = undefined;
    });

    it('a killed peer surfaces as RETRY_EXC_ERR (the connection closes)', async () => {
      peer = await spawnPeer();
      const dev = openDevice({ provider: 'soft', link: 'tcp' });
      await dev.listen();
      me = sideOn(dev);
      const remote = await peer.call<{ endpoint: Endpoint }>('setup', {
        provider: 'soft',
        link: 'tcp',
      });
      // The defaults (about 0.47 s to RETRY_EXC_ERR): a shorter ACK timeout loses the
      // first SEND when the sanitizer lane makes the child slow to answer.
      me.qp.connect(remote.endpoint);
      await peer.call('connect', { endpoint: me.qp.endpoint() });
      await peer.call('postRecv', { count: 1, length: 64 });
      me.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [me.mr.sge(0, 8)] });
      expect((await collect(me.cq, 1))[0]?.status).toBe('SUCCESS');
      await peer.kill();
      me.qp.postSend([
        { wrId: 2, opcode: 'SEND', sgList: [me.mr.sge(0, 8)] },
        { wrId: 3, opcode: 'SEND', sgList: [me.mr.sge(0, 8)] },
      ]);
      expect((await collect(me.cq, 2)).map((w) => [w.wrId, w.status])).toEqual([
        [2, 'RETRY_EXC_ERR'],
        [3, 'WR_FLUSH_ERR'],
      ]);
    });
  });
});

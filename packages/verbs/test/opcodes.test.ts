import { afterEach, describe, expect, it } from 'vitest';
import { collect, type Pair, pair, providers } from './harness/pair.js';

describe.each(providers)('opcodes on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  it('SEND lands in the posted receive with byte length and source QP', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.qp.postRecv({ wrId: 11, sgList: [b.mr.sge(0, 256)] });
    a.mr.bytes.set([1, 2, 3, 4, 5], 0);
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 5)] });
    const [s] = await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(s).toMatchObject({ wrId: 1, status: 'SUCCESS', opcode: 'SEND', qpNum: a.qp.qpn });
    expect(r).toMatchObject({
      wrId: 11,
      status: 'SUCCESS',
      opcode: 'RECV',
      byteLen: 5,
      withImm: false,
      qpNum: b.qp.qpn,
    });
    expect([...b.mr.bytes.subarray(0, 5)]).toEqual([1, 2, 3, 4, 5]);
  });

  it('SEND_WITH_IMM delivers the immediate; a zero-length SEND gives byteLen 0', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.qp.postRecv([
      { wrId: 1, sgList: [b.mr.sge(0, 64)] },
      { wrId: 2, sgList: [b.mr.sge(64, 64)] },
    ]);
    a.qp.postSend([
      { wrId: 1, opcode: 'SEND_WITH_IMM', imm: 0xdeadbeef, sgList: [a.mr.sge(0, 8)] },
      { wrId: 2, opcode: 'SEND', sgList: [] },
    ]);
    await collect(a.cq, 2);
    const [r1, r2] = await collect(b.cq, 2);
    expect(r1).toMatchObject({
      wrId: 1,
      opcode: 'RECV',
      withImm: true,
      imm: 0xdeadbeef,
      byteLen: 8,
    });
    expect(r2).toMatchObject({ wrId: 2, opcode: 'RECV', byteLen: 0 });
  });

  it('RDMA_WRITE and RDMA_READ are one-sided: the target gets no completion', async () => {
    p = pair(provider);
    const { a, b } = p;
    a.mr.bytes.fill(7, 0, 1000);
    a.qp.postSend({
      wrId: 5,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 1000)],
      remoteAddr: b.mr.addr + 4096,
      rkey: b.mr.rkey,
    });
    const [w] = await collect(a.cq, 1);
    expect(w).toMatchObject({ wrId: 5, status: 'SUCCESS', opcode: 'RDMA_WRITE' });
    expect(b.mr.bytes.subarray(4096, 5096).every((v) => v === 7)).toBe(true);
    b.mr.bytes.fill(9, 100, 200);
    a.qp.postSend({
      wrId: 6,
      opcode: 'RDMA_READ',
      sgList: [a.mr.sge(2000, 100)],
      remoteAddr: b.mr.addr + 100,
      rkey: b.mr.rkey,
    });
    const [rd] = await collect(a.cq, 1);
    expect(rd).toMatchObject({ wrId: 6, status: 'SUCCESS', opcode: 'RDMA_READ', byteLen: 100 });
    expect(a.mr.bytes.subarray(2000, 2100).every((v) => v === 9)).toBe(true);
    expect(b.cq.pending()).toBe(0);
  });

  it('many RDMA_READs posted at once all complete, in order (initiator depth ≤ the peer’s)', async () => {
    p = pair(provider);
    const { a, b } = p;
    for (let i = 0; i < 24; i++) b.mr.bytes.fill(i + 1, i * 64, i * 64 + 64);
    a.qp.postSend(
      Array.from({ length: 24 }, (_, i) => ({
        wrId: 100 + i,
        opcode: 'RDMA_READ' as const,
        sgList: [a.mr.sge(8192 + i * 64, 64)],
        remoteAddr: b.mr.addr + i * 64,
        rkey: b.mr.rkey,
      })),
    );
    const wcs = await collect(a.cq, 24);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual(
      Array.from({ length: 24 }, (_, i) => [100 + i, 'SUCCESS']),
    );
    for (let i = 0; i < 24; i++)
      expect(a.mr.bytes.subarray(8192 + i * 64, 8256 + i * 64).every((v) => v === i + 1)).toBe(
        true,
      );
    const ep = a.qp.endpoint();
    if (ep.provider === 'ibverbs') expect(ep.maxRdAtomic).toBeGreaterThanOrEqual(1);
  });

  it('RDMA_WRITE_WITH_IMM consumes a receive and reports the write length, buffer untouched', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.mr.bytes.fill(0xee, 0, 16);
    b.qp.postRecv({ wrId: 3, sgList: [b.mr.sge(0, 16)] });
    a.mr.bytes.fill(1, 0, 512);
    a.qp.postSend({
      wrId: 4,
      opcode: 'RDMA_WRITE_WITH_IMM',
      imm: 42,
      sgList: [a.mr.sge(0, 512)],
      remoteAddr: b.mr.addr + 1024,
      rkey: b.mr.rkey,
    });
    const [s] = await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(s).toMatchObject({ status: 'SUCCESS', opcode: 'RDMA_WRITE', withImm: true });
    expect(r).toMatchObject({
      wrId: 3,
      status: 'SUCCESS',
      opcode: 'RECV_RDMA_WITH_IMM',
      imm: 42,
      byteLen: 512,
      withImm: true,
    });
    expect(b.mr.bytes.subarray(0, 16).every((v) => v === 0xee)).toBe(true);
    expect(b.mr.bytes.subarray(1024, 1536).every((v) => v === 1)).toBe(true);
  });

  it('gathers a send from several SGEs and scatters it over several receive SGEs', async () => {
    p = pair(provider);
    const { a, b } = p;
    a.mr.bytes.set([1, 2, 3], 0);
    a.mr.bytes.set([4, 5], 100);
    a.mr.bytes.set([6, 7, 8, 9], 200);
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 2), b.mr.sge(50, 3), b.mr.sge(300, 10)] });
    a.qp.postSend({
      wrId: 1,
      opcode: 'SEND',
      sgList: [a.mr.sge(0, 3), a.mr.sge(100, 2), a.mr.sge(200, 4)],
    });
    await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(r?.byteLen).toBe(9);
    expect([
      ...b.mr.bytes.subarray(0, 2),
      ...b.mr.bytes.subarray(50, 53),
      ...b.mr.bytes.subarray(300, 304),
    ]).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('inline sends copy the payload at post time, so the buffer can be reused at once', async () => {
    p = pair(provider, {}, { a: { rnrRetry: 7, minRnrTimer: 1 }, b: { minRnrTimer: 1 } });
    const { a, b } = p;
    // No receive yet: the SEND waits on RNR, after the application has overwritten its buffer.
    a.mr.bytes.set([10, 20, 30], 0);
    a.qp.postSend({ wrId: 1, opcode: 'SEND', inline: true, sgList: [a.mr.sge(0, 3)] });
    a.mr.bytes.set([0, 0, 0], 0);
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(r?.status).toBe('SUCCESS');
    expect([...b.mr.bytes.subarray(0, 3)]).toEqual([10, 20, 30]);
  });

  it('unsignaled work requests complete silently; a later signaled one reports', async () => {
    p = pair(provider);
    const { a, b } = p;
    const wrs = Array.from({ length: 5 }, (_, i) => ({
      wrId: i,
      opcode: 'RDMA_WRITE' as const,
      signaled: i === 4,
      sgList: [a.mr.sge(i * 8, 8)],
      remoteAddr: b.mr.addr + i * 8,
      rkey: b.mr.rkey,
    }));
    a.qp.postSend(wrs);
    const wcs = await collect(a.cq, 1);
    expect(wcs.map((w) => w.wrId)).toEqual([4]);
    expect(a.cq.pending()).toBe(0);
  });

  it('keeps order within a QP: 200 SENDs arrive in posting order; a WRITE is visible before a later SEND', async () => {
    p = pair(provider, { maxSendWr: 256, maxRecvWr: 256, cqCapacity: 1024 });
    const { a, b } = p;
    const recvs = Array.from({ length: 200 }, (_, i) => ({
      wrId: i,
      sgList: [b.mr.sge(i * 8, 8)],
    }));
    b.qp.postRecv(recvs.slice(0, 100));
    b.qp.postRecv(recvs.slice(100));
    a.mr.bytes.fill(0x5a, 8192, 8192 + 4096);
    a.qp.postSend({
      wrId: 999,
      opcode: 'RDMA_WRITE',
      signaled: false,
      sgList: [a.mr.sge(8192, 4096)],
      remoteAddr: b.mr.addr + 8192,
      rkey: b.mr.rkey,
    });
    const sends = Array.from({ length: 200 }, (_, i) => ({
      wrId: i,
      opcode: 'SEND' as const,
      signaled: i % 50 === 49,
      sgList: [a.mr.sge(0, 4)],
    }));
    for (let i = 0; i < 200; i += 100) a.qp.postSend(sends.slice(i, i + 100));
    const first = await collect(b.cq, 1);
    expect(b.mr.bytes.subarray(8192, 8192 + 4096).every((v) => v === 0x5a)).toBe(true);
    const rest = await collect(b.cq, 199);
    expect([...first, ...rest].map((w) => w.wrId)).toEqual(recvs.map((r) => r.wrId));
    await collect(a.cq, 4);
  });
});

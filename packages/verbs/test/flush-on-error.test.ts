import { afterEach, describe, expect, it } from 'vitest';
import { collect, type Pair, pair, providers } from './harness/pair.js';

describe.each(providers)('errors and flushing on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  it('after a failed WR every later WR flushes, unsignaled ones included, and receives flush too', async () => {
    p = pair(provider);
    const { a, b } = p;
    a.qp.postRecv([
      { wrId: 100, sgList: [a.mr.sge(0, 64)] },
      { wrId: 101, sgList: [a.mr.sge(64, 64)] },
    ]);
    a.qp.postSend([
      {
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList: [a.mr.sge(0, 8)],
        remoteAddr: b.mr.addr,
        rkey: 0xbad00,
      },
      {
        wrId: 2,
        opcode: 'RDMA_WRITE',
        signaled: false,
        sgList: [a.mr.sge(0, 8)],
        remoteAddr: b.mr.addr,
        rkey: b.mr.rkey,
      },
      { wrId: 3, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] },
    ]);
    const wcs = await collect(a.cq, 5);
    const byId = new Map(wcs.map((w) => [w.wrId, w.status]));
    expect(byId.get(1)).toBe('REM_ACCESS_ERR');
    expect(byId.get(2)).toBe('WR_FLUSH_ERR');
    expect(byId.get(3)).toBe('WR_FLUSH_ERR');
    expect(byId.get(100)).toBe('WR_FLUSH_ERR');
    expect(byId.get(101)).toBe('WR_FLUSH_ERR');
    for (const w of wcs.filter((x) => x.status !== 'SUCCESS'))
      expect([w.byteLen, w.vendorErr]).toEqual([0, 0]);
  });

  it('posting a send in error succeeds and flushes at once', async () => {
    p = pair(provider);
    const { a } = p;
    a.qp.toError();
    a.qp.postSend({ wrId: 5, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    const [wc] = await collect(a.cq, 1);
    expect(wc).toMatchObject({ wrId: 5, status: 'WR_FLUSH_ERR' });
  });

  it('a QP is reusable through error → reset → init → rtr → rts', async () => {
    p = pair(provider);
    const { a, b } = p;
    a.qp.toError();
    a.qp.reset();
    expect(a.qp.state).toBe('reset');
    b.qp.toError();
    b.qp.reset();
    a.qp.connect(b.qp.endpoint());
    b.qp.connect(a.qp.endpoint());
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    expect((await collect(b.cq, 1))[0]?.status).toBe('SUCCESS');
  });

  it('a SEND larger than the receive buffer: sender REM_OP_ERR, receiver LOC_QP_OP_ERR, both to error', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.qp.postRecv([
      { wrId: 1, sgList: [b.mr.sge(0, 64)] },
      { wrId: 2, sgList: [b.mr.sge(64, 64)] },
    ]);
    a.qp.postSend({ wrId: 9, opcode: 'SEND', sgList: [a.mr.sge(0, 128)] });
    expect((await collect(a.cq, 1))[0]?.status).toBe('REM_OP_ERR');
    const r = await collect(b.cq, 2);
    expect(r.map((w) => [w.wrId, w.status])).toEqual([
      [1, 'LOC_QP_OP_ERR'],
      [2, 'WR_FLUSH_ERR'],
    ]);
    expect(a.qp.state).toBe('error');
    expect(b.qp.state).toBe('error');
  });

  it('a bad lkey fails with LOC_QP_OP_ERR; an SGE outside its region with LOC_PROT_ERR', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({
      wrId: 1,
      opcode: 'SEND',
      sgList: [{ addr: a.mr.addr, length: 8, lkey: 0xbad00 }],
    });
    expect((await collect(a.cq, 1))[0]?.status).toBe('LOC_QP_OP_ERR');
    p.close();
    p = pair(provider);
    const q = p;
    q.b.qp.postRecv({ wrId: 1, sgList: [q.b.mr.sge(0, 64)] });
    q.a.qp.postSend({
      wrId: 2,
      opcode: 'SEND',
      sgList: [{ addr: q.a.mr.addr + q.a.mr.length - 4, length: 8, lkey: q.a.mr.lkey }],
    });
    expect((await collect(q.a.cq, 1))[0]?.status).toBe('LOC_PROT_ERR');
  });

  it('a deregistered region used as a local buffer fails the work request, not the process', async () => {
    p = pair(provider);
    const { a, b } = p;
    const mr = a.pd.allocMr(4096, 1);
    const sge = mr.sge(0, 16);
    mr.deregister();
    expect(() => mr.bytes).toThrow(expect.objectContaining({ code: 'ERR_RDMA_MR_INVALID' }));
    expect(() => mr.sge(0, 1)).toThrow(expect.objectContaining({ code: 'ERR_RDMA_MR_INVALID' }));
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({ wrId: 3, opcode: 'SEND', sgList: [sge] });
    const [wc] = await collect(a.cq, 1);
    expect(wc?.status).toBe('LOC_QP_OP_ERR');
  });

  it('the peer of an application-driven error stays RTS; its later SEND ends in RETRY_EXC_ERR', async () => {
    p = pair(provider, {}, { b: { timeout: 8, retryCount: 1 } });
    const { a, b } = p;
    a.qp.toError();
    expect(b.qp.state).toBe('rts');
    b.qp.postSend({ wrId: 4, opcode: 'SEND', sgList: [b.mr.sge(0, 8)] });
    const [wc] = await collect(b.cq, 1);
    expect(wc?.status).toBe('RETRY_EXC_ERR');
    expect(b.qp.state).toBe('error');
  });
});

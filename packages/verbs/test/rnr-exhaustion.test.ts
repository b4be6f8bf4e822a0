import { afterEach, describe, expect, it } from 'vitest';
import { collect, type Pair, pair, providers, sleep } from './harness/pair.js';

describe.each(providers)('receiver not ready on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  it('rnrRetry 0: RNR_RETRY_EXC_ERR at once, sender to error, receiver stays RTS', async () => {
    p = pair(provider, {}, { a: { rnrRetry: 0 } });
    const { a, b } = p;
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    const [wc] = await collect(a.cq, 1);
    expect(wc).toMatchObject({ wrId: 1, status: 'RNR_RETRY_EXC_ERR' });
    expect(a.qp.state).toBe('error');
    expect(b.qp.state).toBe('rts');
  });

  it('rnrRetry 3: fails after its retries when no receive is ever posted', async () => {
    p = pair(provider, {}, { a: { rnrRetry: 3 }, b: { minRnrTimer: 1 } });
    const { a } = p;
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    const [wc] = await collect(a.cq, 1);
    expect(wc?.status).toBe('RNR_RETRY_EXC_ERR');
  });

  it('rnrRetry 7 retries forever: a receive posted later completes the SEND', async () => {
    p = pair(provider, {}, { a: { rnrRetry: 7 }, b: { minRnrTimer: 1 } });
    const { a, b } = p;
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await sleep(100);
    expect(a.cq.pending()).toBe(0);
    b.qp.postRecv({ wrId: 2, sgList: [b.mr.sge(0, 64)] });
    const [s] = await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(s?.status).toBe('SUCCESS');
    expect(r).toMatchObject({ wrId: 2, status: 'SUCCESS', byteLen: 8 });
  });

  it('RDMA_WRITE_WITH_IMM without a posted receive fails with RNR_RETRY_EXC_ERR', async () => {
    p = pair(provider, {}, { a: { rnrRetry: 0 } });
    const { a, b } = p;
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE_WITH_IMM',
      imm: 1,
      sgList: [a.mr.sge(0, 8)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
    });
    const [wc] = await collect(a.cq, 1);
    expect(wc?.status).toBe('RNR_RETRY_EXC_ERR');
  });

  it('later work requests wait behind the one blocked on RNR (in order)', async () => {
    p = pair(provider, {}, { a: { rnrRetry: 7 }, b: { minRnrTimer: 1 } });
    const { a, b } = p;
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    a.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 8)],
      remoteAddr: b.mr.addr + 512,
      rkey: b.mr.rkey,
    });
    await sleep(30);
    expect(a.cq.pending()).toBe(0);
    b.qp.postRecv({ wrId: 9, sgList: [b.mr.sge(0, 64)] });
    const wcs = await collect(a.cq, 2);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
      [1, 'SUCCESS'],
      [2, 'SUCCESS'],
    ]);
  });
});

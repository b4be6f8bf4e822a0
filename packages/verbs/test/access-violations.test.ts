import { afterEach, describe, expect, it } from 'vitest';
import { Access } from '../src/index.js';
import { collect, type Pair, pair, providers } from './harness/pair.js';

describe.each(providers)('remote access checks on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  async function expectAccessFailure(status: string) {
    const { a, b } = p;
    const [wc] = await collect(a.cq, 1);
    expect(wc?.status).toBe(status);
    expect(a.qp.state).toBe('error');
    // The target QP also goes to error and its posted receives flush.
    const [flushed] = await collect(b.cq, 1);
    expect(flushed).toMatchObject({ wrId: 77, status: 'WR_FLUSH_ERR' });
    expect(b.qp.state).toBe('error');
  }

  it('bad rkey: REM_ACCESS_ERR, target memory untouched', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.qp.postRecv({ wrId: 77, sgList: [b.mr.sge(0, 64)] });
    a.mr.bytes.fill(1, 0, 64);
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 64)],
      remoteAddr: b.mr.addr,
      rkey: (b.mr.rkey ^ 0x55) >>> 0,
    });
    await expectAccessFailure('REM_ACCESS_ERR');
    expect(b.mr.bytes.subarray(0, 64).every((v) => v === 0)).toBe(true);
  });

  it('a write straddling the end of the region writes nothing, not even the in-bounds part', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.qp.postRecv({ wrId: 77, sgList: [b.mr.sge(0, 64)] });
    a.mr.bytes.fill(1, 0, 64);
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 64)],
      remoteAddr: b.mr.addr + b.mr.length - 32,
      rkey: b.mr.rkey,
    });
    await expectAccessFailure('REM_ACCESS_ERR');
    expect(b.mr.bytes.subarray(b.mr.length - 32).every((v) => v === 0)).toBe(true);
  });

  it('a region without remote write or read rejects those operations', async () => {
    p = pair(provider);
    const { a, b } = p;
    const local = b.pd.allocMr(4096, Access.LocalWrite);
    b.qp.postRecv({ wrId: 77, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_READ',
      sgList: [a.mr.sge(0, 64)],
      remoteAddr: local.addr,
      rkey: local.rkey,
    });
    await expectAccessFailure('REM_ACCESS_ERR');
  });

  it("the target QP's access flags are checked too: REM_INV_REQ_ERR", async () => {
    p = pair(provider, {}, { b: { access: Access.RemoteRead } });
    const { a, b } = p;
    b.qp.postRecv({ wrId: 77, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 64)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
    });
    await expectAccessFailure('REM_INV_REQ_ERR');
  });

  it('a zero-length write with a bogus rkey succeeds', async () => {
    p = pair(provider);
    const { a } = p;
    a.qp.postSend({ wrId: 1, opcode: 'RDMA_WRITE', sgList: [], remoteAddr: 12345, rkey: 0xbad });
    const [wc] = await collect(a.cq, 1);
    expect(wc?.status).toBe('SUCCESS');
    expect(a.qp.state).toBe('rts');
  });

  it('a deregistered region can no longer be targeted', async () => {
    p = pair(provider);
    const { a, b } = p;
    const target = b.pd.allocMr(4096, Access.LocalWrite | Access.RemoteWrite);
    const { addr, rkey } = target;
    target.deregister();
    b.qp.postRecv({ wrId: 77, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 64)],
      remoteAddr: addr,
      rkey,
    });
    await expectAccessFailure('REM_ACCESS_ERR');
  });
});

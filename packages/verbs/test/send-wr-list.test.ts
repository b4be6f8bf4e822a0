import { afterEach, describe, expect, it } from 'vitest';
import { RdmaError, SendWrList } from '../src/index.js';
import { collect, type Pair, pair, providers } from './harness/pair.js';

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(RdmaError);
    return (e as RdmaError).code;
  }
  return undefined;
}

describe.each(providers)('pre-encoded send lists on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  it('a list of READs posted in one call lands every entry, one completion for its signaled last', async () => {
    p = pair(provider, { maxSendWr: 64 });
    const { a, b } = p;
    for (let i = 0; i < 4096; i++) b.mr.bytes[i] = (i * 7) & 255;
    const list = new SendWrList(40);
    for (let i = 0; i < 40; i++)
      list.addRead(a.mr.addr + i * 64, 16 + i, a.mr.lkey, b.mr.addr + ((i * 97) % 4000), b.mr.rkey);
    for (let i = 0; i < 40; i++) list.setWrId(i, 1000 + i);
    list.setSignaled(39, true);
    a.qp.postSendList(list);
    const [wc] = await collect(a.cq, 1);
    expect(wc).toMatchObject({ wrId: 1039, status: 'SUCCESS', opcode: 'RDMA_READ', byteLen: 55 });
    for (let i = 0; i < 40; i++) {
      const off = (i * 97) % 4000;
      expect([...a.mr.bytes.subarray(i * 64, i * 64 + 16 + i)]).toEqual([
        ...b.mr.bytes.subarray(off, off + 16 + i),
      ]);
    }
    expect(a.cq.pending()).toBe(0); // the 39 unsignaled READs made no completion
  });

  it('READs that alternate remote and local regions each land from and into their own', async () => {
    p = pair(provider, { maxSendWr: 64 });
    const { a, b } = p;
    const b2 = b.pd.allocMr(4096, b.mr.access);
    const a2 = a.pd.allocMr(4096, a.mr.access);
    b.mr.bytes.fill(0x11, 0, 4096);
    b2.bytes.fill(0x22, 0, 4096);
    const list = new SendWrList(32);
    for (let i = 0; i < 32; i++) {
      const from = i % 3 === 0 ? b2 : b.mr;
      const into = i % 2 === 0 ? a2 : a.mr;
      list.addRead(into.addr + i * 32, 32, into.lkey, from.addr + i * 64, from.rkey);
    }
    list.setWrId(31, 31);
    list.setSignaled(31, true);
    a.qp.postSendList(list);
    expect(await collect(a.cq, 1)).toMatchObject([{ wrId: 31, status: 'SUCCESS' }]);
    for (let i = 0; i < 32; i++) {
      const into = i % 2 === 0 ? a2 : a.mr;
      const want = i % 3 === 0 ? 0x22 : 0x11;
      expect(into.bytes.subarray(i * 32, i * 32 + 32).every((v) => v === want)).toBe(true);
    }
  });

  it('a READ into a local region without local write fails locally after the ones before it landed', async () => {
    p = pair(provider);
    const { a, b } = p;
    const ro = a.pd.allocMr(4096, 0);
    b.mr.bytes.fill(5, 0, 64);
    const list = new SendWrList(3);
    list.addRead(a.mr.addr, 8, a.mr.lkey, b.mr.addr, b.mr.rkey);
    list.addRead(ro.addr, 8, ro.lkey, b.mr.addr, b.mr.rkey);
    list.addRead(a.mr.addr + 8, 8, a.mr.lkey, b.mr.addr, b.mr.rkey);
    for (let i = 0; i < 3; i++) list.setWrId(i, i + 1);
    list.setSignaled(2, true);
    a.qp.postSendList(list);
    const wcs = await collect(a.cq, 2);
    expect(wcs.map((w) => w.wrId)).toEqual([2, 3]);
    expect(['LOC_PROT_ERR', 'LOC_QP_OP_ERR']).toContain(wcs[0]?.status);
    expect(wcs[1]?.status).toBe('WR_FLUSH_ERR');
    expect([...a.mr.bytes.subarray(0, 8)]).toEqual([5, 5, 5, 5, 5, 5, 5, 5]);
    expect(ro.bytes.subarray(0, 8).every((v) => v === 0)).toBe(true);
  });

  it('any run of records posts again after its remote address, wrId and flags are rewritten', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.mr.bytes.set([1, 2, 3, 4, 5, 6, 7, 8], 100);
    const list = new SendWrList(3);
    list.add({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 4)],
      remoteAddr: b.mr.addr + 200,
      rkey: b.mr.rkey,
      signaled: false,
    });
    list.addRead(a.mr.addr + 8, 4, a.mr.lkey, 0, 0);
    list.addRead(a.mr.addr + 16, 4, a.mr.lkey, 0, 0);
    a.mr.bytes.set([9, 9, 9, 9], 0);
    list.setRemote(1, b.mr.addr + 100, b.mr.rkey);
    list.setRemote(2, b.mr.addr + 104, b.mr.rkey);
    list.setWrId(2, 7);
    list.setSignaled(2, true);
    a.qp.postSendList(list, 1, 2); // the WRITE (record 0) is not part of this run
    expect(await collect(a.cq, 1)).toMatchObject([{ wrId: 7, status: 'SUCCESS', byteLen: 4 }]);
    expect([...a.mr.bytes.subarray(8, 12)]).toEqual([1, 2, 3, 4]);
    expect([...a.mr.bytes.subarray(16, 20)]).toEqual([5, 6, 7, 8]);
    expect([...b.mr.bytes.subarray(200, 204)]).toEqual([0, 0, 0, 0]);
    list.setSignaled(2, false);
    list.setSignaled(0, true);
    a.qp.postSendList(list, 0, 1);
    expect(await collect(a.cq, 1)).toMatchObject([
      { wrId: 1, status: 'SUCCESS', opcode: 'RDMA_WRITE' },
    ]);
    expect([...b.mr.bytes.subarray(200, 204)]).toEqual([9, 9, 9, 9]);
  });

  it('a READ outside the remote region completes as postSend’s does: REM_ACCESS_ERR, then the rest flushes', async () => {
    p = pair(provider);
    const { a, b } = p;
    const list = new SendWrList(3);
    list.addRead(a.mr.addr, 8, a.mr.lkey, b.mr.addr, b.mr.rkey);
    list.addRead(a.mr.addr + 8, 64, a.mr.lkey, b.mr.addr + b.mr.length - 32, b.mr.rkey);
    list.addRead(a.mr.addr + 80, 8, a.mr.lkey, b.mr.addr, (b.mr.rkey ^ 0x55) >>> 0);
    for (let i = 0; i < 3; i++) list.setWrId(i, i + 1);
    list.setSignaled(2, true);
    a.qp.postSendList(list);
    const wcs = await collect(a.cq, 2);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
      [2, 'REM_ACCESS_ERR'],
      [3, 'WR_FLUSH_ERR'],
    ]);
    expect(a.qp.state).toBe('error');
  });

  it('a bad local key fails the READ locally (LOC_PROT_ERR), as postSend’s does', async () => {
    p = pair(provider);
    const { a, b } = p;
    const list = new SendWrList(1);
    list.addRead(a.mr.addr, 8, (a.mr.lkey ^ 0x55) >>> 0, b.mr.addr, b.mr.rkey);
    list.setWrId(0, 9);
    list.setSignaled(0, true);
    a.qp.postSendList(list);
    const [wc] = await collect(a.cq, 1);
    expect(wc?.wrId).toBe(9);
    expect(['LOC_PROT_ERR', 'LOC_QP_OP_ERR']).toContain(wc?.status);
  });

  it('bad records are refused at add() with postSend’s codes, and nothing is added', () => {
    p = pair(provider);
    const { a } = p;
    const list = new SendWrList(2);
    expect(codeOf(() => list.addRead(-1, 8, 1, 0, 1))).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(codeOf(() => list.addRead(0, 2 ** 32, 1, 0, 1))).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(codeOf(() => list.addRead(0, 8, 1.5, 0, 1))).toBe('ERR_RDMA_INVALID_ARG');
    expect(codeOf(() => list.addRead(0, 8, 1, 0, 2 ** 32))).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(codeOf(() => list.add({ wrId: 1, opcode: 'NOPE' as never, sgList: [] }))).toBe(
      'ERR_RDMA_INVALID_ARG',
    );
    expect(codeOf(() => list.add({ wrId: -1, opcode: 'SEND', sgList: [] }))).toBe(
      'ERR_RDMA_OUT_OF_RANGE',
    );
    expect(
      codeOf(() => list.add({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 1), a.mr.sge(1, 1)] })),
    ).toBe('ERR_RDMA_OUT_OF_RANGE'); // more SGEs than the list's maxSge (1)
    expect(list.length).toBe(0);
    list.addRead(0, 8, 1, 0, 1);
    list.add({ wrId: 1, opcode: 'SEND', sgList: [] });
    expect(codeOf(() => list.addRead(0, 8, 1, 0, 1))).toBe('ERR_RDMA_INVALID_ARG'); // full
    expect(codeOf(() => list.setWrId(2, 1))).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(codeOf(() => list.setRemote(1, 0, 1))).toBe('ERR_RDMA_INVALID_ARG'); // a SEND
    expect(codeOf(() => list.setRemote(0, -5, 1))).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(codeOf(() => new SendWrList(0))).toBe('ERR_RDMA_OUT_OF_RANGE');
  });

  it('QP limits are checked at post before anything goes: SGEs, inline size, message size, range', () => {
    p = pair(provider, { maxSge: 1, maxInlineData: 16 });
    const { a, b } = p;
    const wide = new SendWrList(1, { maxSge: 2 });
    wide.add({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 1), a.mr.sge(1, 1)] });
    expect(codeOf(() => a.qp.postSendList(wide))).toBe('ERR_RDMA_OUT_OF_RANGE');
    const inl = new SendWrList(1);
    inl.add({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 64)], inline: true });
    expect(codeOf(() => a.qp.postSendList(inl))).toBe('ERR_RDMA_OUT_OF_RANGE');
    const big = new SendWrList(1);
    big.addRead(a.mr.addr, 2 ** 32 - 1, a.mr.lkey, b.mr.addr, b.mr.rkey);
    expect(codeOf(() => a.qp.postSendList(big))).toBe('ERR_RDMA_OUT_OF_RANGE');
    const ok = new SendWrList(2);
    ok.addRead(a.mr.addr, 8, a.mr.lkey, b.mr.addr, b.mr.rkey);
    expect(codeOf(() => a.qp.postSendList(ok, 0, 2))).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(codeOf(() => a.qp.postSendList(ok, 2))).toBe('ERR_RDMA_OUT_OF_RANGE');
    expect(codeOf(() => a.qp.postSendList({} as SendWrList))).toBe('ERR_RDMA_INVALID_ARG');
    expect(a.cq.pending()).toBe(0);
    expect(a.qp.state).toBe('rts');
  });

  it('its encoded records are not reachable from outside: only add() and the setters write them', () => {
    p = pair(provider, { maxSge: 1 });
    const { a, b } = p;
    const list = new SendWrList(1);
    list.addRead(a.mr.addr, 8, a.mr.lkey, b.mr.addr, b.mr.rkey);
    // No public array to rewrite past add()'s checks and the list-wide limits postSendList uses.
    expect((list as unknown as Record<string, unknown>).words).toBeUndefined();
    const reachable = [
      ...Object.getOwnPropertyNames(list),
      ...Object.getOwnPropertyNames(SendWrList.prototype),
    ].map((k) => (list as unknown as Record<string, unknown>)[k]);
    expect(reachable.some((v) => v instanceof Float64Array)).toBe(false);
    expect(a.qp.state).toBe('rts');
  });

  it('a list longer than the send queue posts what fits, then ENOMEM as postSend', async () => {
    p = pair(provider, { maxSendWr: 8 });
    const { a, b } = p;
    // The queue the device granted (rxe rounds 8 up): what fits is that many.
    const fits = a.qp.caps.maxSendWr;
    const list = new SendWrList(fits + 4);
    for (let i = 0; i < fits + 4; i++) {
      list.addRead(a.mr.addr + (i % 12) * 8, 8, a.mr.lkey, b.mr.addr, b.mr.rkey);
      list.setWrId(i, i);
    }
    list.setSignaled(fits - 1, true);
    let err: unknown;
    try {
      a.qp.postSendList(list);
    } catch (e) {
      err = e;
    }
    expect((err as RdmaError).code).toBe('ERR_RDMA_QUEUE_FULL');
    expect(err).toMatchObject({ posted: fits });
    expect(await collect(a.cq, 1)).toMatchObject([{ wrId: fits - 1, status: 'SUCCESS' }]);
  });

  it('posting before RTS is refused as postSend’s is, and after close throws', () => {
    p = pair(provider);
    const { a, b } = p;
    const qp = a.pd.createQp({ sendCq: a.cq, recvCq: a.cq, maxSendWr: 4, maxRecvWr: 4 });
    const list = new SendWrList(1);
    list.addRead(a.mr.addr, 8, a.mr.lkey, b.mr.addr, b.mr.rkey);
    const viaList = codeOf(() => qp.postSendList(list));
    const viaPost = codeOf(() =>
      qp.postSend({
        wrId: 0,
        opcode: 'RDMA_READ',
        sgList: [a.mr.sge(0, 8)],
        remoteAddr: b.mr.addr,
        rkey: b.mr.rkey,
        signaled: false,
      }),
    );
    expect(viaList).toBeDefined();
    expect(viaList).toBe(viaPost);
    qp.close();
    expect(codeOf(() => qp.postSendList(list))).toBe(codeOf(() => qp.postSend([])));
  });
});

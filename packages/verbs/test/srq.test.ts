import { afterEach, describe, expect, it } from 'vitest';
import { type Device, openDevice } from '../src/index.js';
import { ALL, collect, providers, type Side, side, until } from './harness/pair.js';

describe.each(providers)('shared receive queues on %s', (provider) => {
  const open: Device[] = [];
  afterEach(() => {
    for (const d of open.splice(0)) d.close();
  });

  it('two QPs draw receives from one SRQ; the limit event fires when it runs low', async () => {
    const dev = openDevice({ provider });
    open.push(dev);
    const pd = dev.allocPd();
    const cq = dev.createCq({ capacity: 64 });
    const mr = pd.allocMr(1 << 14, ALL);
    const srq = pd.createSrq({ maxWr: 16, maxSge: 1 });
    const q1 = pd.createQp({ sendCq: cq, recvCq: cq, srq });
    const q2 = pd.createQp({ sendCq: cq, recvCq: cq, srq });
    expect(() => q1.postRecv({ wrId: 1, sgList: [] })).toThrow(
      expect.objectContaining({ code: 'ERR_RDMA_INVALID_STATE' }),
    );
    const senders: Side[] = [side(provider), side(provider)];
    open.push(...senders.map((s) => s.dev));
    const [s1, s2] = senders as [Side, Side];
    q1.connect(s1.qp.endpoint());
    s1.qp.connect(q1.endpoint());
    q2.connect(s2.qp.endpoint());
    s2.qp.connect(q2.endpoint());
    srq.postRecv(
      Array.from({ length: 4 }, (_, i) => ({ wrId: 100 + i, sgList: [mr.sge(i * 64, 64)] })),
    );
    let limitEvents = 0;
    srq.on('asyncEvent', (e: { type: string }) => {
      if (e.type === 'SRQ_LIMIT_REACHED') limitEvents++;
    });
    srq.armLimit(2);
    s1.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [s1.mr.sge(0, 10)] });
    s2.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [s2.mr.sge(0, 20)] });
    s1.qp.postSend({ wrId: 3, opcode: 'SEND', sgList: [s1.mr.sge(0, 30)] });
    const r = await collect(cq, 3);
    expect(r.map((w) => w.wrId)).toEqual([100, 101, 102]);
    expect(r.map((w) => [w.qpNum, w.byteLen])).toEqual([
      [q1.qpn, 10],
      [q2.qpn, 20],
      [q1.qpn, 30],
    ]);
    await until(() => limitEvents > 0, 'the SRQ limit event');
    expect(limitEvents).toBe(1);
    expect(() => srq.close()).toThrow(expect.objectContaining({ code: 'ERR_RDMA_BUSY' }));
  });
});

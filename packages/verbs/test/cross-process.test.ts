import { afterEach, describe, expect, it } from 'vitest';
import { allocCompletions, type Endpoint, SendWrList, type WorkCompletion } from '../src/index.js';
import { type ChildPeer, spawnPeer } from './harness/child.js';
import { collect, providers, type Side, side } from './harness/pair.js';

describe.each(providers)('peers in separate processes on %s', (provider) => {
  let peer: ChildPeer | undefined;
  let me: Side | undefined;
  afterEach(async () => {
    await peer?.kill();
    me?.dev.close();
    peer = me = undefined;
  });

  async function connectToChild(options: object = {}) {
    peer = await spawnPeer();
    me = side(provider);
    const remote = await peer.call<{ endpoint: Endpoint; addr: number; rkey: number }>('setup', {
      provider,
    });
    me.qp.connect(remote.endpoint, options);
    await peer.call('connect', { endpoint: me.qp.endpoint() });
    return remote;
  }

  it('SEND, RDMA WRITE and READ between processes; the target process does nothing for one-sided ops', async () => {
    const remote = await connectToChild();
    const m = me as Side;
    const p = peer as ChildPeer;
    await p.call('postRecv', { count: 1, length: 256 });
    m.mr.bytes.fill(3, 0, 100);
    m.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [m.mr.sge(0, 100)] });
    expect((await collect(m.cq, 1))[0]?.status).toBe('SUCCESS');
    const [r] = await p.call<{ byteLen: number; status: string }[]>('collect', { count: 1 });
    expect(r).toMatchObject({ status: 'SUCCESS', byteLen: 100 });
    m.mr.bytes.fill(8, 1000, 1000 + 4000);
    m.qp.postSend({
      wrId: 2,
      opcode: 'RDMA_WRITE',
      sgList: [m.mr.sge(1000, 4000)],
      remoteAddr: remote.addr + 8192,
      rkey: remote.rkey,
    });
    expect((await collect(m.cq, 1))[0]?.status).toBe('SUCCESS');
    const bytes = await p.call<number[]>('bytes', { offset: 8192, length: 4000 });
    expect(bytes.every((v) => v === 8)).toBe(true);
    m.qp.postSend({
      wrId: 3,
      opcode: 'RDMA_READ',
      sgList: [m.mr.sge(20000, 4000)],
      remoteAddr: remote.addr + 8192,
      rkey: remote.rkey,
    });
    expect((await collect(m.cq, 1))[0]).toMatchObject({ status: 'SUCCESS', byteLen: 4000 });
    expect(m.mr.bytes.subarray(20000, 24000).every((v) => v === 8)).toBe(true);
  });

  it('a SEND from the child wakes this process through the completion event', async () => {
    await connectToChild();
    const m = me as Side;
    m.qp.postRecv({ wrId: 5, sgList: [m.mr.sge(0, 512)] });
    const woke = new Promise<void>((resolve) => m.cq.on('completion', () => resolve()));
    m.cq.requestNotify();
    await (peer as ChildPeer).call('send', { length: 300, fill: 4 });
    await woke;
    const [r] = await collect(m.cq, 1);
    expect(r).toMatchObject({ wrId: 5, byteLen: 300 });
    expect(m.mr.bytes.subarray(0, 300).every((v) => v === 4)).toBe(true);
  });

  // A spin polls while the peer process answers: the answer must be seen by the spin or, when
  // the spin ends first, by the sleep after it (soft spins natively and gives the core up
  // between polls; ibverbs spins in JS). No timing is asserted: every answer must arrive intact.
  it.each([
    ['the default spin', undefined],
    ['a long spin', 2000],
    ['no spin', 0],
  ])(
    'a ping-pong of SENDs waited for with %s on both sides delivers every answer',
    async (_, spinUs) => {
      await connectToChild();
      const m = me as Side;
      const rounds = 200;
      const length = 64;
      const wait = spinUs === undefined ? {} : { spinUs };
      const echoed = (peer as ChildPeer).call<number>('echo', { count: rounds, length, spinUs });
      const wcs = allocCompletions(16);
      const recv = { wrId: 7, sgList: [m.mr.sge(0, length)] };
      for (let k = 0; k < rounds; k++) {
        m.qp.postRecv(recv);
        m.mr.bytes.fill(k & 0x7f, length, 2 * length);
        m.qp.postSend({ wrId: 8, opcode: 'SEND', sgList: [m.mr.sge(length, length)] });
        let got: WorkCompletion | undefined;
        while (!got) {
          const n = m.cq.poll(wcs);
          for (let i = 0; i < n; i++) {
            expect(wcs[i]?.status).toBe('SUCCESS');
            if (wcs[i]?.opcode === 'RECV') got = wcs[i];
          }
          if (!got) await m.cq.waitForCompletion({ ...wait, timeoutMs: 10_000 });
        }
        expect(got.byteLen).toBe(length);
        expect(m.mr.bytes.subarray(0, length).every((v) => v === (k & 0x7f) + 1)).toBe(true);
      }
      expect(await echoed).toBe(rounds);
    },
  );

  it('a list of READs from another process (soft: one run) reads what that process holds', async () => {
    const remote = await connectToChild();
    const m = me as Side;
    const bytes = m.mr.bytes as Uint8Array;
    for (let i = 0; i < 4096; i++) bytes[i] = (i * 7 + 1) & 255;
    m.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [m.mr.sge(0, 4096)],
      remoteAddr: remote.addr,
      rkey: remote.rkey,
    });
    expect((await collect(m.cq, 1))[0]?.status).toBe('SUCCESS');
    const n = 32;
    const from = (i: number) => ((i * 37) % 32) * 128;
    const list = new SendWrList(n);
    for (let i = 0; i < n; i++) {
      list.addRead(m.mr.addr + 16384 + i * 128, 128, m.mr.lkey, remote.addr + from(i), remote.rkey);
      list.setWrId(i, 100 + i);
      list.setSignaled(i, i % 8 === 7);
    }
    m.qp.postSendList(list);
    const wcs = await collect(m.cq, 4);
    expect(wcs.map((w) => [w.wrId, w.status, w.byteLen])).toEqual(
      [107, 115, 123, 131].map((id) => [id, 'SUCCESS', 128]),
    );
    for (let i = 0; i < n; i++)
      expect(bytes.subarray(16384 + i * 128, 16384 + (i + 1) * 128)).toEqual(
        bytes.subarray(from(i), from(i) + 128),
      );
  });

  it('a list of READs after the peer process died: RETRY_EXC_ERR, the rest flushed (as per WR)', async () => {
    const remote = await connectToChild({ timeout: 10, retryCount: 2 });
    const m = me as Side;
    await (peer as ChildPeer).kill();
    const list = new SendWrList(8);
    for (let i = 0; i < 8; i++) {
      list.addRead(m.mr.addr + i * 64, 64, m.mr.lkey, remote.addr + i * 64, remote.rkey);
      list.setWrId(i, i + 1);
      list.setSignaled(i, true);
    }
    m.qp.postSendList(list);
    const wcs = await collect(m.cq, 8);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
      [1, 'RETRY_EXC_ERR'],
      ...Array.from({ length: 7 }, (_, i) => [i + 2, 'WR_FLUSH_ERR']),
    ]);
    expect(m.qp.state).toBe('error');
  });

  it('a killed peer surfaces as RETRY_EXC_ERR within the configured timeout, the rest flushed', async () => {
    await connectToChild({ timeout: 10, retryCount: 2 });
    const m = me as Side;
    await (peer as ChildPeer).kill();
    m.qp.postSend([
      { wrId: 1, opcode: 'SEND', sgList: [m.mr.sge(0, 8)] },
      { wrId: 2, opcode: 'SEND', sgList: [m.mr.sge(0, 8)] },
    ]);
    const wcs = await collect(m.cq, 2);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
      [1, 'RETRY_EXC_ERR'],
      [2, 'WR_FLUSH_ERR'],
    ]);
    expect(m.qp.state).toBe('error');
  });
});

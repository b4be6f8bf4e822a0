// A large RDMA WRITE/READ does not hold the event loop: soft moves it in steps, one per turn
// of the loop, and keeps the RC contract meanwhile (later WRs of the QP complete after it, its
// completion comes after its last byte, the peer sees all of it when it sees a later SEND),
// and objects destroyed while a step is due end the operation cleanly (no use after free:
// this file also runs in the sanitizer lane).
import { afterEach, describe, expect, it } from 'vitest';
import { collect, type Pair, pair, providers, sleep, until } from './harness/pair.js';

const GiB = 1 << 30;
const MiB = 1 << 20;

/** A pattern that differs per 4 KiB page, so a missing or misplaced step shows. */
function pattern(bytes: Uint8Array): void {
  const words = new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >>> 2);
  for (let i = 0; i < words.length; i += 1024) words[i] = (i >>> 10) ^ 0x9e3779b9;
  bytes[bytes.length - 1] = 0x5a;
}

/** Counts turns of the event loop until stopped: proof that it ran during a copy. */
function loopTurns(): { turns: () => number; stop: () => void } {
  let n = 0;
  let on = true;
  const tick = () => {
    n++;
    if (on) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    turns: () => n,
    stop: () => {
      on = false;
    },
  };
}

describe.each(providers)('large WRITE/READ on %s', (provider) => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  it('WRITE of 1 GiB then SEND on the same QP: the SEND completes after it, the peer sees every byte', async () => {
    p = pair(provider, { mrBytes: GiB + 4096, maxSge: 1 });
    const { a, b } = p;
    // rxe's messages stop at 8 MiB: there, the largest the device takes.
    const size = Math.min(GiB, a.dev.info.limits.maxMsgSize);
    pattern(a.mr.bytes.subarray(0, size));
    b.qp.postRecv({ wrId: 50, sgList: [b.mr.sge(GiB, 64)] });
    const loop = loopTurns();
    a.qp.postSend([
      {
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList: [a.mr.sge(0, size)],
        remoteAddr: b.mr.addr,
        rkey: b.mr.rkey,
      },
      { wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] },
    ]);
    const turnsAtPost = loop.turns();
    const recv = await collect(b.cq, 1, 60_000);
    // When the SEND is seen, the whole WRITE has landed.
    expect(recv[0]).toMatchObject({ wrId: 50, status: 'SUCCESS' });
    expect(Buffer.compare(b.mr.bytes.subarray(0, size), a.mr.bytes.subarray(0, size))).toBe(0);
    const sent = await collect(a.cq, 2, 60_000);
    expect(sent.map((w) => [w.wrId, w.status, w.opcode])).toEqual([
      [1, 'SUCCESS', 'RDMA_WRITE'],
      [2, 'SUCCESS', 'SEND'],
    ]);
    expect(sent[0]?.byteLen).toBe(size);
    loop.stop();
    if (provider === 'soft') {
      // The loop turned while the copy ran (the post itself moved at most a few steps).
      expect(turnsAtPost).toBe(0);
      expect(loop.turns()).toBeGreaterThan(1);
    }
  }, 120_000); // 1 GiB of fresh pages faulted in: 28 s measured at load 16 on 2 cores

  it('a large WRITE_WITH_IMM reports the whole length to the receiver; a large READ returns every byte', async () => {
    const most = 64 * MiB + 12345;
    p = pair(provider, { mrBytes: 2 * most + 4096, maxSge: 2 });
    const { a, b } = p;
    const size = Math.min(most, a.dev.info.limits.maxMsgSize);
    pattern(a.mr.bytes.subarray(0, size));
    b.qp.postRecv({ wrId: 60, sgList: [b.mr.sge(2 * most, 16)] });
    // Two local SGEs: a step may end inside either.
    const half = (size >>> 1) + 3;
    a.qp.postSend({
      wrId: 3,
      opcode: 'RDMA_WRITE_WITH_IMM',
      imm: 77,
      sgList: [a.mr.sge(0, half), a.mr.sge(half, size - half)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
    });
    const r = (await collect(b.cq, 1, 60_000))[0];
    expect(r).toMatchObject({
      wrId: 60,
      status: 'SUCCESS',
      opcode: 'RECV_RDMA_WITH_IMM',
      byteLen: size,
      imm: 77,
    });
    expect(Buffer.compare(b.mr.bytes.subarray(0, size), a.mr.bytes.subarray(0, size))).toBe(0);
    expect((await collect(a.cq, 1, 60_000))[0]?.status).toBe('SUCCESS');
    // READ it back into the second half of a's region.
    b.mr.bytes[7] = 0xa5; // differs from what a wrote: the READ brings the change back
    a.qp.postSend({
      wrId: 4,
      opcode: 'RDMA_READ',
      sgList: [a.mr.sge(size, half), a.mr.sge(size + half, size - half)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
    });
    expect((await collect(a.cq, 1, 60_000))[0]).toMatchObject({
      wrId: 4,
      status: 'SUCCESS',
      byteLen: size,
    });
    expect(Buffer.compare(a.mr.bytes.subarray(size, 2 * size), b.mr.bytes.subarray(0, size))).toBe(
      0,
    );
  });

  if (provider !== 'soft') return;
  // Soft only: destroying objects while a step is due (an ibverbs NIC finishes or fails
  // the DMA by itself; there is no step of ours in flight).

  const big = 256 * MiB;
  const write = (q: Pair) => ({
    wrId: 9,
    opcode: 'RDMA_WRITE' as const,
    sgList: [q.a.mr.sge(0, big)],
    remoteAddr: q.b.mr.addr,
    rkey: q.b.mr.rkey,
  });

  it('the target MR deregistered mid-copy: REM_ACCESS_ERR, the target QP in error, the device usable', async () => {
    p = pair(provider, { mrBytes: big });
    const { a, b } = p;
    a.qp.postSend(write(p));
    b.mr.close(); // steps remain: the next one finds the key gone
    expect((await collect(a.cq, 1, 60_000))[0]).toMatchObject({
      wrId: 9,
      status: 'REM_ACCESS_ERR',
    });
    await until(() => b.qp.state === 'error', 'the target QP in error');
    expect(a.qp.state).toBe('error');
  });

  it('the initiator MR deregistered mid-copy: a local error, nothing read from the freed pages', async () => {
    p = pair(provider, { mrBytes: big });
    const { a } = p;
    a.qp.postSend(write(p));
    a.mr.close();
    const wc = (await collect(a.cq, 1, 60_000))[0];
    expect(wc?.wrId).toBe(9);
    expect(wc?.status).toBe('LOC_QP_OP_ERR');
  });

  it('the initiator QP destroyed mid-copy, then the peer device closed: nothing runs on', async () => {
    p = pair(provider, { mrBytes: big });
    const { a, b } = p;
    a.qp.postSend(write(p));
    a.qp.close();
    await sleep(20); // turns of the loop in which a step would have been due
    expect(a.cq.pending()).toBe(0);
    // A second QP of the same devices still works.
    const q2 = a.pd.createQp({ sendCq: a.cq, recvCq: a.cq, maxSendWr: 4, maxRecvWr: 4 });
    const t2 = b.pd.createQp({ sendCq: b.cq, recvCq: b.cq, maxSendWr: 4, maxRecvWr: 4 });
    q2.connect(t2.endpoint());
    t2.connect(q2.endpoint());
    q2.postSend({ ...write(p), sgList: [a.mr.sge(0, 8 * MiB)] });
    b.dev.close(); // the target vanishes while the steps run
    const wc = (await collect(a.cq, 1, 60_000))[0];
    expect(wc?.wrId).toBe(9);
    expect(['SUCCESS', 'RETRY_EXC_ERR']).toContain(wc?.status);
  });

  it('the initiator device closed mid-copy: no step runs after it', async () => {
    p = pair(provider, { mrBytes: big });
    const { a } = p;
    a.qp.postSend(write(p));
    a.dev.close();
    await sleep(20);
    expect(a.dev.closed).toBe(true);
  });
});

import { afterEach, describe, expect, it } from 'vitest';
import { openDevice } from '../src/index.js';
import { collect, type Pair, pair, providers, type Side, side } from './harness/pair.js';

const code = (c: string) => expect.objectContaining({ code: c });

describe.each(providers)('state machine and bad input on %s', (provider) => {
  let s: Side | undefined;
  let p: Pair | undefined;
  afterEach(() => {
    s?.dev.close();
    p?.close();
    s = p = undefined;
  });

  it('walks reset → init → rtr → rts', () => {
    p = pair(provider);
    expect(p.a.qp.state).toBe('rts');
    const fresh = side(provider);
    s = fresh;
    expect(fresh.qp.state).toBe('reset');
    fresh.qp.toInit();
    expect(fresh.qp.state).toBe('init');
    fresh.qp.toRtr(p.b.qp.endpoint());
    expect(fresh.qp.state).toBe('rtr');
    fresh.qp.toRts();
    expect(fresh.qp.state).toBe('rts');
  });

  it('rejects transitions that skip states, naming both states', () => {
    s = side(provider);
    expect(() => s?.qp.toRts()).toThrow(code('ERR_RDMA_INVALID_STATE'));
    expect(() => s?.qp.toRts()).toThrow(/from reset to rts/);
    // The failed verb and its errno are kept (EINVAL), on both providers.
    expect(() => s?.qp.toRts()).toThrow(
      expect.objectContaining({ syscall: 'ibv_modify_qp', errno: 22 }),
    );
    s.qp.toInit();
    // INIT → INIT is a legal verbs transition (it changes attributes); rxe accepts it.
    expect(() => s?.qp.toInit()).not.toThrow();
    expect(s.qp.state).toBe('init');
    expect(() => s?.qp.toRts()).toThrow(/from init to rts/);
  });

  it('post_send before RTS is EINVAL; post_recv is refused in reset, allowed in init and rtr', () => {
    s = side(provider);
    const wr = { wrId: 1, opcode: 'SEND' as const, sgList: [s.mr.sge(0, 8)] };
    const rwr = { wrId: 1, sgList: [s.mr.sge(0, 8)] };
    expect(() => s?.qp.postSend(wr)).toThrow(code('ERR_RDMA_INVALID_STATE'));
    expect(() => s?.qp.postRecv(rwr)).toThrow(code('ERR_RDMA_INVALID_STATE'));
    s.qp.toInit();
    expect(() => s?.qp.postSend(wr)).toThrow(code('ERR_RDMA_INVALID_STATE'));
    expect(() => s?.qp.postRecv(rwr)).not.toThrow();
  });

  it('qp.caps are what the device granted: at least what was asked, every slot usable', async () => {
    const asked = { maxSendWr: 4, maxRecvWr: 5, maxSge: 2, maxInlineData: 16 };
    p = pair(provider, asked);
    const { a, b } = p;
    const c = a.qp.caps;
    expect(c.maxSendWr).toBeGreaterThanOrEqual(asked.maxSendWr);
    expect(c.maxRecvWr).toBeGreaterThanOrEqual(asked.maxRecvWr);
    expect(c.maxSendSge).toBeGreaterThanOrEqual(asked.maxSge);
    expect(c.maxRecvSge).toBeGreaterThanOrEqual(asked.maxSge);
    expect(c.maxInlineData).toBeGreaterThanOrEqual(asked.maxInlineData);
    // Soft allocates exactly what it is asked for (rxe rounds rings up: asked 4, got 7).
    if (provider === 'soft')
      expect(c).toEqual({
        maxSendWr: 4,
        maxRecvWr: 5,
        maxSendSge: 2,
        maxRecvSge: 2,
        maxInlineData: 16,
      });
    // The whole granted ring takes one batch, and the receive queue as many receives.
    b.qp.postRecv(
      Array.from({ length: b.qp.caps.maxRecvWr }, (_, i) => ({
        wrId: i,
        sgList: [b.mr.sge(i * 8, 8)],
      })),
    );
    a.qp.postSend(
      Array.from({ length: c.maxSendWr }, (_, i) => ({
        wrId: i,
        opcode: 'SEND' as const,
        signaled: i === c.maxSendWr - 1,
        sgList: [a.mr.sge(0, 8)],
      })),
    );
    expect((await collect(a.cq, 1))[0]).toMatchObject({ wrId: c.maxSendWr - 1, status: 'SUCCESS' });
  });

  it('a full send queue throws ERR_RDMA_QUEUE_FULL and says how many of the batch were posted', async () => {
    p = pair(provider, { maxSendWr: 4 });
    const { a, b } = p;
    const cap = a.qp.caps.maxSendWr;
    const wrs = Array.from({ length: cap + 2 }, (_, i) => ({
      wrId: i,
      opcode: 'RDMA_WRITE' as const,
      signaled: false,
      sgList: [a.mr.sge(0, 8)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
    }));
    let err: unknown;
    try {
      a.qp.postSend(wrs);
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'ERR_RDMA_QUEUE_FULL', posted: cap, retryable: true });
    // soft: a signaled WR cannot be posted either until a signaled completion is reaped, as
    // on NICs that reclaim send slots from CQEs (mlx5). rxe frees the slots of unsignaled
    // WRs as soon as they are done, so there it may go in (documented difference).
    if (provider === 'soft') {
      expect(() => a.qp.postSend({ ...wrs[0], signaled: true } as never)).toThrow(
        code('ERR_RDMA_QUEUE_FULL'),
      );
    }
  });

  it('send queue slots come back when a signaled completion is polled', async () => {
    p = pair(provider, { maxSendWr: 4 });
    const { a, b } = p;
    const cap = a.qp.caps.maxSendWr;
    for (let round = 0; round < 3; round++) {
      const wrs = Array.from({ length: cap }, (_, i) => ({
        wrId: i,
        opcode: 'RDMA_WRITE' as const,
        signaled: i === cap - 1,
        sgList: [a.mr.sge(0, 8)],
        remoteAddr: b.mr.addr,
        rkey: b.mr.rkey,
      }));
      a.qp.postSend(wrs);
      expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    }
  });

  it('rejects malformed work requests with typed errors before posting anything', () => {
    p = pair(provider);
    const { a, b } = p;
    const good = { wrId: 1, opcode: 'SEND' as const, sgList: [a.mr.sge(0, 8)] };
    const bad: [unknown, string][] = [
      [{ ...good, wrId: -1 }, 'ERR_RDMA_OUT_OF_RANGE'],
      [{ ...good, wrId: 1.5 }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...good, opcode: 'ATOMIC' }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...good, sgList: 'x' }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...good, sgList: [{ addr: 'a', length: 1, lkey: 1 }] }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...good, sgList: Array(9).fill(a.mr.sge(0, 1)) }, 'ERR_RDMA_OUT_OF_RANGE'],
      [{ ...good, opcode: 'SEND_WITH_IMM' }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...good, opcode: 'RDMA_WRITE' }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...good, inline: true, sgList: [a.mr.sge(0, 1000)] }, 'ERR_RDMA_OUT_OF_RANGE'],
      [null, 'ERR_RDMA_INVALID_ARG'],
    ];
    for (const [wr, c] of bad) expect(() => a.qp.postSend([good, wr as never])).toThrow(code(c));
    expect(a.cq.pending()).toBe(0);
    expect(() => a.qp.postRecv({ wrId: 1, sgList: [{ addr: 0, length: -1, lkey: 0 }] })).toThrow(
      code('ERR_RDMA_OUT_OF_RANGE'),
    );
    void b;
  });

  it('rejects bad resource sizes and options', () => {
    const dev = openDevice({ provider });
    try {
      const pd = dev.allocPd();
      const cq = dev.createCq();
      expect(() => dev.createCq({ capacity: 0 })).toThrow(code('ERR_RDMA_OUT_OF_RANGE'));
      expect(() => dev.createCq({ capacity: 1.5 })).toThrow(code('ERR_RDMA_INVALID_ARG'));
      expect(() => pd.allocMr(0, 1)).toThrow(code('ERR_RDMA_OUT_OF_RANGE'));
      expect(() => pd.allocMr(64, 2)).toThrow(code('ERR_RDMA_INVALID_ARG'));
      expect(() => pd.regMr('nope' as never, 1)).toThrow(code('ERR_RDMA_INVALID_ARG'));
      expect(() => pd.createQp({ sendCq: cq, recvCq: {} as never })).toThrow(
        code('ERR_RDMA_INVALID_ARG'),
      );
      expect(() => pd.createQp({ sendCq: cq, recvCq: cq, maxSendWr: 1e9 })).toThrow(
        code('ERR_RDMA_OUT_OF_RANGE'),
      );
      const qp = pd.createQp({ sendCq: cq, recvCq: cq });
      qp.toInit();
      expect(() => qp.toRtr({ provider, qpn: 1, psn: 0 } as never)).toThrow();
      expect(() => qp.toRts({ retryCount: 9 } as never)).toThrow(code('ERR_RDMA_OUT_OF_RANGE'));
      expect(() => openDevice({ provider: 'bogus' as never })).toThrow(
        code('ERR_RDMA_INVALID_ARG'),
      );
      expect(() => openDevice({ provider, name: 'nope0' })).toThrow(code('ERR_RDMA_NO_DEVICE'));
    } finally {
      dev.close();
    }
  });
});

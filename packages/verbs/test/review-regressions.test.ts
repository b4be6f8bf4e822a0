// Cases found in review: each once crashed the process or corrupted state.
import { afterEach, describe, expect, it } from 'vitest';
import { allocCompletions } from '../src/index.js';
import { collect, type Pair, pair, providers, side, sleep } from './harness/pair.js';

describe.each(providers)('review regressions on %s', (provider) => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  it('poll with a negative or oversized max never writes past its output', async () => {
    p = pair(provider, { cqCapacity: 64, maxSendWr: 40 });
    const { a, b } = p;
    a.qp.postSend(
      Array.from({ length: 40 }, (_, i) => ({
        wrId: i,
        opcode: 'RDMA_WRITE' as const,
        sgList: [a.mr.sge(0, 8)],
        remoteAddr: b.mr.addr,
        rkey: b.mr.rkey,
      })),
    );
    const wcs = allocCompletions(4);
    expect(() => a.cq.poll(wcs, -1)).toThrow(
      expect.objectContaining({ code: 'ERR_RDMA_OUT_OF_RANGE' }),
    );
    expect(a.cq.pending()).toBe(40); // refused before any completion was taken
    expect(a.cq.poll(wcs, 1e9)).toBe(4);
    expect(a.cq.pending()).toBe(36);
  });

  it('an inline SGE outside registered memory is refused at post instead of being read', async () => {
    p = pair(provider);
    const { a, b } = p;
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    const good = { wrId: 8, opcode: 'SEND' as const, inline: true, sgList: [a.mr.sge(0, 8)] };
    const bad = { ...good, wrId: 9, sgList: [{ addr: 16, length: 8, lkey: a.mr.lkey }] };
    expect(() => a.qp.postSend([good, bad])).toThrow(
      expect.objectContaining({ code: 'ERR_RDMA_INVALID_ARG', posted: 1 }),
    );
    expect((await collect(a.cq, 1))[0]).toMatchObject({ wrId: 8, status: 'SUCCESS' });
    expect(a.qp.state).toBe('rts');
  });

  it('completions flushed before a reset and polled after it do not break send accounting', async () => {
    p = pair(provider, { maxSendWr: 8 });
    const { a, b } = p;
    a.qp.toError();
    a.qp.postSend(
      Array.from({ length: 6 }, (_, i) => ({
        wrId: i,
        opcode: 'SEND' as const,
        sgList: [a.mr.sge(0, 8)],
      })),
    );
    a.qp.reset();
    await collect(a.cq, 6);
    a.qp.connect(b.qp.endpoint());
    for (let round = 0; round < 3; round++) {
      a.qp.postSend(
        Array.from({ length: 8 }, (_, i) => ({
          wrId: i,
          opcode: 'RDMA_WRITE' as const,
          signaled: i === 7,
          sgList: [a.mr.sge(0, 8)],
          remoteAddr: b.mr.addr,
          rkey: b.mr.rkey,
        })),
      );
      expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
    }
  });

  it('a QP hears only the peer it was connected to', async () => {
    const a = side(provider);
    const b = side(provider);
    const c = side(provider);
    try {
      a.qp.connect(b.qp.endpoint(), { timeout: 8, retryCount: 1 });
      b.qp.connect(a.qp.endpoint());
      b.qp.reset();
      b.qp.connect(c.qp.endpoint());
      c.qp.connect(b.qp.endpoint());
      b.qp.postRecv({ wrId: 7, sgList: [b.mr.sge(0, 8)] });
      a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 2)] });
      expect((await collect(a.cq, 1))[0]?.status).toBe('RETRY_EXC_ERR');
      await sleep(10);
      expect(b.cq.pending()).toBe(0);
    } finally {
      for (const s of [a, b, c]) s.dev.close();
    }
  });

  it('refuses to register a resizable ArrayBuffer', () => {
    const s = side(provider);
    try {
      const Ctor = ArrayBuffer as unknown as new (
        n: number,
        o: { maxByteLength: number },
      ) => ArrayBuffer;
      const rab = new Ctor(64, { maxByteLength: 4096 });
      expect((rab as ArrayBuffer & { resizable?: boolean }).resizable).toBe(true);
      expect(() => s.pd.regMr(rab, 1)).toThrow(
        expect.objectContaining({ code: 'ERR_RDMA_INVALID_ARG' }),
      );
    } finally {
      s.dev.close();
    }
  });
});

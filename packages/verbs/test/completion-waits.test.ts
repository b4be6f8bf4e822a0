// Sleeping waits share one deadline timer per CQ and pooled records: each wait still ends
// on its own terms (its deadline, its signal, a completion, or the CQ closing).
import { afterEach, expect, it } from 'vitest';
import { allocCompletions } from '../src/index.js';
import { collect, type Pair, pair, providers } from './harness/pair.js';

const code = (c: string) => expect.objectContaining({ code: c });

let p: Pair | undefined;
afterEach(() => {
  p?.close();
  p = undefined;
});

it('concurrent waits end by deadline, signal or completion, each on its own', async () => {
  p = pair('soft');
  const { a, b } = p;
  const ac = new AbortController();
  const long = b.cq.waitForCompletion({ timeoutMs: 60_000, spinUs: 0 });
  const short = b.cq.waitForCompletion({ timeoutMs: 1, spinUs: 0 });
  const aborted = b.cq.waitForCompletion({ timeoutMs: 60_000, spinUs: 0, signal: ac.signal });
  await expect(short).rejects.toEqual(code('ERR_RDMA_TIMEOUT'));
  ac.abort(new Error('stop'));
  await expect(aborted).rejects.toEqual(code('ERR_RDMA_TIMEOUT'));
  // The long wait is still there and ends with the completion.
  b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 8)] });
  a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
  await expect(long).resolves.toBeUndefined();
  expect(b.cq.pending()).toBe(1);
});

it('waits again and again on pooled records, then fail with ERR_RDMA_CLOSED on close', async () => {
  p = pair('soft');
  const { a, b } = p;
  const wcs = allocCompletions(1);
  for (let i = 0; i < 50; i++) {
    const w = b.cq.waitForCompletion({ spinUs: 0 });
    b.qp.postRecv({ wrId: i, sgList: [b.mr.sge(0, 8)] });
    a.qp.postSend({ wrId: i, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await w;
    expect(b.cq.poll(wcs)).toBe(1);
    expect((await collect(a.cq, 1)).length).toBe(1); // the send's own completion
  }
  const pending = [b.cq.waitForCompletion({ spinUs: 0 }), b.cq.waitForCompletion({ spinUs: 0 })];
  p.close();
  p = undefined;
  for (const w of pending) await expect(w).rejects.toEqual(code('ERR_RDMA_CLOSED'));
});

it('an already aborted signal rejects without waiting', async () => {
  p = pair('soft');
  const ac = new AbortController();
  ac.abort();
  await expect(p.b.cq.waitForCompletion({ signal: ac.signal, spinUs: 0 })).rejects.toEqual(
    code('ERR_RDMA_TIMEOUT'),
  );
});

it.each(providers)(
  '%s: a spin that finds nothing ends, then the wait sleeps until its deadline',
  async (provider) => {
    p = pair(provider);
    // Spins 2 ms (soft: natively, giving the core up between polls), finds nothing, arms and
    // sleeps: the 1 ms deadline ends it with ERR_RDMA_TIMEOUT, and the CQ still works after.
    await expect(p.b.cq.waitForCompletion({ spinUs: 2000, timeoutMs: 1 })).rejects.toEqual(
      code('ERR_RDMA_TIMEOUT'),
    );
    p.b.qp.postRecv({ wrId: 3, sgList: [p.b.mr.sge(0, 16)] });
    p.a.qp.postSend({ wrId: 4, opcode: 'SEND', sgList: [p.a.mr.sge(0, 16)] });
    await p.b.cq.waitForCompletion({ spinUs: 2000, timeoutMs: 10_000 });
    expect(p.b.cq.pending()).toBeGreaterThan(0);
    expect((await collect(p.b.cq, 1))[0]).toMatchObject({ wrId: 3, status: 'SUCCESS' });
  },
);

it.each(providers)(
  '%s: a wait that finds its completion there still owes an armed listener its event',
  async (provider) => {
    p = pair(provider);
    const { a, b } = p;
    let fired = 0;
    b.cq.on('completion', () => fired++);
    // No spin (the look before a sleep finds it) and a spin that finds it.
    for (const [k, spinUs] of [0, 50].entries()) {
      b.qp.postRecv({ wrId: 5, sgList: [b.mr.sge(0, 16)] });
      b.cq.requestNotify();
      a.qp.postSend({ wrId: 6, opcode: 'SEND', sgList: [a.mr.sge(0, 16)] });
      // The completion is taken before the doorbell it rang runs: the event must come anyway.
      await expect.poll(() => b.cq.pending(), { timeout: 10_000 }).toBe(1);
      await b.cq.waitForCompletion({ spinUs, timeoutMs: 10_000 });
      expect((await collect(b.cq, 1))[0]).toMatchObject({ wrId: 5, status: 'SUCCESS' });
      await expect.poll(() => fired, { timeout: 10_000 }).toBe(k + 1);
      await collect(a.cq, 1);
    }
  },
);

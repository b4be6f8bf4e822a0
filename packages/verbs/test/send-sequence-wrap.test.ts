// A send queue keeps its WRs apart over any number of posts, whatever its size. Soft numbers a
// QP's WRs with a 64-bit sequence that starts just below 2^32, so these queues cross the
// 32-bit boundary their completions and TCP-link tokens are named with; with a 5-entry queue
// a 32-bit sequence taken modulo 5 would also have put two WRs in one slot there.
import { afterEach, describe, expect, it } from 'vitest';
import { nextLinkToken } from '../src/internal/soft/link/frames.js';
import { collect, linkPair, type Pair, pair, providers } from './harness/pair.js';

const SENDS = 48;

/** SENDs i = 0 … SENDS−1 of 4 bytes (the value i), every 3rd and the last signaled. */
async function sendAcross(p: Pair): Promise<void> {
  const { a, b } = p;
  const depth = a.qp.caps.maxSendWr;
  expect(depth).toBeGreaterThanOrEqual(5);
  const view = new DataView(a.mr.bytes.buffer, a.mr.bytes.byteOffset);
  const sendWcs: number[] = [];
  let outstanding = 0;
  for (let i = 0; i < SENDS; i++) {
    b.qp.postRecv({ wrId: i, sgList: [b.mr.sge(i * 4, 4)] });
    view.setUint32(i * 4, i, true);
    const signaled = i % 3 === 2 || i === SENDS - 1;
    a.qp.postSend({
      wrId: 1000 + i,
      opcode: 'SEND',
      sgList: [a.mr.sge(i * 4, 4)],
      signaled,
    });
    outstanding++;
    // A signaled completion retires the unsignaled WRs before it: the queue never fills.
    if (signaled) {
      const [wc] = await collect(a.cq, 1);
      expect(wc).toMatchObject({ wrId: 1000 + i, status: 'SUCCESS', opcode: 'SEND' });
      sendWcs.push(wc?.wrId as number);
      outstanding = 0;
    }
    expect(outstanding).toBeLessThan(depth);
  }
  const signaledCount = Array.from({ length: SENDS }, (_, i) => i).filter(
    (i) => i % 3 === 2 || i === SENDS - 1,
  ).length;
  expect(sendWcs.length).toBe(signaledCount);
  // Every SEND landed once, in order, in its own receive, with its own bytes.
  const recvs = await collect(b.cq, SENDS);
  expect(recvs.map((w) => w.wrId)).toEqual(Array.from({ length: SENDS }, (_, i) => i));
  expect(recvs.every((w) => w.status === 'SUCCESS' && w.byteLen === 4)).toBe(true);
  const got = new DataView(b.mr.bytes.buffer, b.mr.bytes.byteOffset);
  for (let i = 0; i < SENDS; i++) expect(got.getUint32(i * 4, true)).toBe(i);
}

describe.each(providers)('send queue sequence on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  it('a 5-entry send queue passes 48 SENDs in order, every 3rd signaled (past any 32-bit boundary)', async () => {
    p = pair(provider, { maxSendWr: 5, maxRecvWr: 64 });
    await sendAcross(p);
  });
});

describe('send queue sequence over the soft TCP link', () => {
  let p: Pair;
  afterEach(() => p?.close());

  it('a 5-entry send queue passes 48 SENDs in order over the link, tokens included (several WRs on the wire at once)', async () => {
    p = await linkPair({ maxSendWr: 5, maxRecvWr: 64 });
    await sendAcross(p);
  });
});

describe('link tokens', () => {
  it('run 1 … 2^32 − 1 and then 1 again: 0 (none) is never a token', () => {
    expect(nextLinkToken(1)).toBe(2);
    expect(nextLinkToken(2 ** 32 - 2)).toBe(2 ** 32 - 1);
    expect(nextLinkToken(2 ** 32 - 1)).toBe(1);
  });
});

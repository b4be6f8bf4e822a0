import { afterEach, describe, expect, it } from 'vitest';
import { collect, type Pair, pair, providers, until } from './harness/pair.js';

describe.each(providers)('completion queue overrun on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  it('a receive CQ overrun is reported, keeps what it had, fails the receiving QP and the sender', async () => {
    p = pair(
      provider,
      { cqCapacity: 4, maxRecvWr: 16, maxSendWr: 16 },
      { a: { timeout: 8, retryCount: 1 } },
    );
    const { a, b } = p;
    const events: string[] = [];
    b.cq.on('asyncEvent', (e) => events.push(e.type));
    b.qp.postRecv(
      Array.from({ length: 8 }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(i * 64, 64)] })),
    );
    // Unsignaled: only the sender's failure (and the flushes after it) reach its CQ.
    a.qp.postSend(
      Array.from({ length: 8 }, (_, i) => ({
        wrId: i,
        opcode: 'SEND' as const,
        signaled: false,
        sgList: [a.mr.sge(0, 8)],
      })),
    );
    await until(() => events.includes('CQ_ERR'), 'the CQ_ERR async event');
    expect(events).toContain('CQ_ERR');
    expect(b.cq.overrun).toBe(true);
    expect(b.qp.state).toBe('error');
    const kept = await collect(b.cq, b.cq.capacity);
    // The CQ keeps the first `capacity` completions (rxe grants 7 when asked for 4).
    expect(kept.map((w) => w.wrId)).toEqual(Array.from({ length: b.cq.capacity }, (_, i) => i));
    const failed = await collect(a.cq, 1);
    expect(failed[0]?.status).toBe('RETRY_EXC_ERR');
  });
});

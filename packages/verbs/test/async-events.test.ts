// QP and CQ async events, send-CQ overrun and receives posted in error: what each provider
// does, matching rxe (../../shared/RC-SEMANTICS.md) or naming the documented difference.
import { afterEach, describe, expect, it } from 'vitest';
import type { CqAsyncEvent, ProviderName, QpAsyncEvent, QueuePair } from '../src/index.js';
import {
  collect,
  nothingWithin,
  type Pair,
  pair,
  providers,
  type Side,
  side,
  sleep,
  until,
} from './harness/pair.js';

const isSoft = (provider: ProviderName) => provider === 'soft';

function recordQpEvents(qp: QueuePair): string[] {
  const seen: string[] = [];
  qp.on('asyncEvent', (e: QpAsyncEvent) => seen.push(e.type));
  return seen;
}

describe.each(providers)('async events on %s', (provider) => {
  let p: Pair;
  afterEach(() => p?.close());

  it('a remote access error: no event on the initiator; QP_FATAL on the target only on soft', async () => {
    p = pair(provider);
    const { a, b } = p;
    const initiator = recordQpEvents(a.qp);
    const target = recordQpEvents(b.qp);
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 8)],
      remoteAddr: b.mr.addr,
      rkey: 0xbad00,
    });
    expect((await collect(a.cq, 1))[0]?.status).toBe('REM_ACCESS_ERR');
    await until(() => b.qp.state === 'error', 'the target QP in error');
    if (isSoft(provider)) {
      // Documented difference: soft raises the spec's responder access-violation event.
      await until(() => target.length > 0, 'QP_FATAL on the target');
      expect(target).toEqual(['QP_FATAL']);
    } else {
      await nothingWithin(b.cq, 100);
      expect(target).toEqual([]);
    }
    expect(initiator).toEqual([]);
  });

  it('an application-driven error raises no QP event on either side', async () => {
    p = pair(provider);
    const { a, b } = p;
    const seen = [...[a.qp, b.qp].map(recordQpEvents)];
    a.qp.toError();
    await nothingWithin(a.cq, 100);
    expect(seen).toEqual([[], []]);
    expect(b.qp.state).toBe('rts');
  });

  /** `p.b` gets a second QP on an SRQ, connected to a fresh sender (its device closes with p). */
  function srqTarget(): { qp: QueuePair; sender: Side } {
    const { b } = p;
    const srq = b.pd.createSrq({ maxWr: 8, maxSge: 1 });
    const qp = b.pd.createQp({ sendCq: b.cq, recvCq: b.cq, srq });
    const sender = side(provider);
    const close = p.close;
    p.close = () => {
      close();
      sender.dev.close();
    };
    qp.connect(sender.qp.endpoint());
    sender.qp.connect(qp.endpoint());
    srq.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    return { qp, sender };
  }

  it('an application-driven error of a QP on an SRQ raises LAST_WQE_REACHED, once (rxe: never)', async () => {
    p = pair(provider);
    const { qp } = srqTarget();
    const seen = recordQpEvents(qp);
    qp.toError();
    if (p.b.dev.info.name.startsWith('rxe')) {
      // Measured in the rxe lane (Linux 6.1): rxe raises no LAST_WQE_REACHED for a QP the
      // application moves to error (5 s waited). A documented difference; soft follows the
      // specification, as hardware NICs do.
      await sleep(300);
      expect(seen).toEqual([]);
      return;
    }
    await until(() => seen.length > 0, 'LAST_WQE_REACHED');
    expect(seen).toEqual(['LAST_WQE_REACHED']);
    qp.toError(); // ERR → ERR: the same error, no second event
    await sleep(100);
    expect(seen).toEqual(['LAST_WQE_REACHED']);
  });

  if (isSoft(provider)) {
    // Not measured on rxe: these stay soft-only until the rxe lane confirms them.
    it('a QP on an SRQ failed by its peer: QP_FATAL, then LAST_WQE_REACHED', async () => {
      p = pair(provider);
      const { qp, sender } = srqTarget();
      const seen = recordQpEvents(qp);
      sender.qp.postSend({
        wrId: 9,
        opcode: 'RDMA_WRITE',
        sgList: [sender.mr.sge(0, 8)],
        remoteAddr: p.b.mr.addr,
        rkey: 0xbad00,
      });
      expect((await collect(sender.cq, 1))[0]?.status).toBe('REM_ACCESS_ERR');
      await until(() => seen.length >= 2, 'both events on the target');
      expect(seen).toEqual(['QP_FATAL', 'LAST_WQE_REACHED']);
      // The error the application then confirms is the same one: nothing more.
      qp.toError();
      await sleep(50);
      expect(seen).toEqual(['QP_FATAL', 'LAST_WQE_REACHED']);
    });

    it('after a reset, the next error of a QP on an SRQ reports again', async () => {
      p = pair(provider);
      const { qp } = srqTarget();
      const seen = recordQpEvents(qp);
      qp.toError();
      await until(() => seen.length === 1, 'the first LAST_WQE_REACHED');
      qp.reset();
      qp.toError();
      await until(() => seen.length === 2, 'the second LAST_WQE_REACHED');
      expect(seen).toEqual(['LAST_WQE_REACHED', 'LAST_WQE_REACHED']);
    });
  }

  it('a send CQ overrun raises CQ_ERR and is never silent', async () => {
    p = pair(provider);
    const { a, b } = p;
    const sendCq = a.dev.createCq({ capacity: 4 });
    const qp = a.pd.createQp({ sendCq, recvCq: a.cq, maxSendWr: 32, maxRecvWr: 4 });
    const peer = b.pd.createQp({ sendCq: b.cq, recvCq: b.cq, maxSendWr: 4, maxRecvWr: 32 });
    qp.connect(peer.endpoint());
    peer.connect(qp.endpoint());
    const cqEvents: string[] = [];
    sendCq.on('asyncEvent', (e: CqAsyncEvent) => cqEvents.push(e.type));
    // Far more signaled completions than the CQ holds (rxe grants 7 for 4; ibverbs can
    // stage as many again), none polled.
    const sends = 3 * sendCq.capacity + 1;
    peer.postRecv(
      Array.from({ length: sends }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(i * 8, 8)] })),
    );
    qp.postSend(
      Array.from({ length: sends }, (_, i) => ({
        wrId: i,
        opcode: 'SEND' as const,
        sgList: [a.mr.sge(0, 8)],
      })),
    );
    await until(() => cqEvents.includes('CQ_ERR'), 'CQ_ERR on the send CQ');
    expect(sendCq.overrun).toBe(true);
    // The CQ keeps the completions it had, in order.
    const kept = await collect(sendCq, sendCq.capacity);
    expect(kept.map((w) => w.wrId)).toEqual(Array.from({ length: sendCq.capacity }, (_, i) => i));
    expect(kept.every((w) => w.status === 'SUCCESS')).toBe(true);
    if (isSoft(provider)) {
      // Documented difference: a lost send completion would desynchronise the application,
      // so soft moves the QP to error (rxe loses the completion and keeps the QP in RTS).
      await until(() => qp.state === 'error', 'the QP of the lost completion in error');
    } else {
      expect(qp.state).toBe('rts');
    }
  });

  it('a receive posted in error', async () => {
    p = pair(provider);
    const { a } = p;
    a.qp.toError();
    a.qp.postRecv({ wrId: 7, sgList: [a.mr.sge(0, 64)] });
    if (isSoft(provider)) {
      // Documented difference: soft flushes it at once, as the specification says.
      expect((await collect(a.cq, 1))[0]).toMatchObject({ wrId: 7, status: 'WR_FLUSH_ERR' });
    } else {
      // rxe accepts it but flushes it only at the next transition to error.
      expect(await nothingWithin(a.cq, 100)).toBe(0);
      a.qp.toError();
      expect((await collect(a.cq, 1))[0]).toMatchObject({ wrId: 7, status: 'WR_FLUSH_ERR' });
    }
  });
});

// Solicited-only notification (ibv_req_notify_cq's solicited_only, IBV_SEND_SOLICITED): an
// armed CQ is woken by the receive of a solicited SEND, SEND_WITH_IMM or WRITE_WITH_IMM, or by
// a failed completion; unsolicited completions (the receiver's own sends, plain SENDs) are
// queued and polled, and wake nothing. Run against every provider under test, and on soft's
// TCP link (whose frames carry the flag: LINK_FLAG_SOLICITED).
import { afterEach, describe, expect, it } from 'vitest';
import {
  allocCompletions,
  type CompletionQueue,
  NOTIFY_SOLICITED_ONLY,
  type SendWr,
} from '../src/index.js';
import { collect, linkPair, type Pair, pair, providers } from './harness/pair.js';

interface Path {
  name: string;
  /** rxe (ibverbs here) does not wake a solicited-only arm for a failed unsolicited receive. */
  failedReceiveWakes: boolean;
  make(): Promise<Pair>;
}

const paths: Path[] = [
  ...providers.map((provider) => ({
    name: provider === 'soft' ? 'soft (shared memory)' : provider,
    failedReceiveWakes: provider === 'soft',
    make: async () => pair(provider),
  })),
  ...(providers.includes('soft')
    ? [{ name: 'soft (TCP link)', failedReceiveWakes: true, make: () => linkPair() }]
    : []),
];

type Opcode = 'SEND' | 'SEND_WITH_IMM' | 'RDMA_WRITE_WITH_IMM';
/** The operations that complete a receive at the target, so may be solicited. */
const OPCODES: Opcode[] = ['SEND', 'SEND_WITH_IMM', 'RDMA_WRITE_WITH_IMM'];

const code = (c: string) => expect.objectContaining({ code: c });

/**
 * Lets the event loop run a whole turn: a doorbell already rung is delivered (the second
 * immediate runs after a poll phase that began after this call).
 */
const turn = () => new Promise<void>((r) => setImmediate(() => setImmediate(r)));

/** Counts 'completion' events and the completions the CQ held at each. */
function watch(cq: CompletionQueue) {
  let fired: () => void = () => undefined;
  const w = {
    events: 0,
    pendingAtEvent: [] as number[],
    /** Resolves at the next event (bounded: the test's own timeout). */
    next: new Promise<void>((r) => {
      fired = r;
    }),
  };
  cq.on('completion', () => {
    w.events++;
    w.pendingAtEvent.push(cq.pending());
    fired();
  });
  return w;
}

describe.each(paths)('solicited-only notification on $name', ({ make, failedReceiveWakes }) => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  /**
   * a sends 8 bytes to b with `opcode` (a WITH_IMM carries imm 5; a WRITE goes to b's MR at 64);
   * resolves once a's own completion is polled (b has the receive).
   */
  async function send(pr: Pair, wrId: number, solicited: boolean, opcode: Opcode = 'SEND') {
    const wr: SendWr = { wrId, opcode, sgList: [pr.a.mr.sge(0, 8)], solicited };
    if (opcode !== 'SEND') wr.imm = 5;
    if (opcode === 'RDMA_WRITE_WITH_IMM') {
      wr.remoteAddr = pr.b.mr.addr + 64;
      wr.rkey = pr.b.mr.rkey;
    }
    pr.a.qp.postSend(wr);
    const [wc] = await collect(pr.a.cq, 1);
    expect(wc?.status).toBe('SUCCESS');
  }

  it.each(OPCODES)(
    '%s: unsolicited ones are only queued, a solicited one wakes the arm',
    async (opcode) => {
      p = await make();
      const { b } = p;
      for (let i = 0; i < 3; i++) b.qp.postRecv({ wrId: 70 + i, sgList: [b.mr.sge(0, 8)] });
      const w = watch(b.cq);
      b.cq.requestNotify(NOTIFY_SOLICITED_ONLY);
      await send(p, 1, false, opcode);
      await send(p, 2, false, opcode);
      await turn();
      expect(w.events).toBe(0);
      expect(b.cq.pending()).toBe(2);
      await send(p, 3, true, opcode);
      await w.next;
      expect(w.events).toBe(1);
      const wcs = await collect(b.cq, 3);
      const recv = opcode === 'RDMA_WRITE_WITH_IMM' ? 'RECV_RDMA_WITH_IMM' : 'RECV';
      expect(wcs.map((wc) => [wc.wrId, wc.opcode, wc.status])).toEqual(
        [70, 71, 72].map((id) => [id, recv, 'SUCCESS']),
      );
      if (opcode !== 'SEND') expect(wcs.map((wc) => wc.imm)).toEqual([5, 5, 5]);
    },
  );

  it('a plain arm (not solicited-only) is woken by an unsolicited SEND', async () => {
    p = await make();
    const { b } = p;
    b.qp.postRecv({ wrId: 80, sgList: [b.mr.sge(0, 8)] });
    const w = watch(b.cq);
    b.cq.requestNotify();
    await send(p, 81, false);
    await w.next;
    expect(w.events).toBe(1);
    expect((await collect(b.cq, 1))[0]).toMatchObject({ wrId: 80, status: 'SUCCESS' });
  });

  it('an unsolicited SEND whose receive fails (too short) wakes a solicited-only arm (not on rxe)', async () => {
    p = await make();
    const { a, b } = p;
    b.qp.postRecv({ wrId: 90, sgList: [b.mr.sge(0, 4)] });
    const w = watch(b.cq);
    b.cq.requestNotify(NOTIFY_SOLICITED_ONLY);
    a.qp.postSend({ wrId: 91, opcode: 'SEND', sgList: [a.mr.sge(0, 8)], solicited: false });
    if (failedReceiveWakes) {
      await w.next;
      expect(w.events).toBe(1);
    }
    // rxe (measured: no event in 120 s) takes the solicited bit of an error completion from
    // the packet's SE bit; the IB spec says any unsuccessful completion fires the arm, as soft
    // does. Either way the failed receive is there to poll.
    // The statuses are rxe's (LOC_QP_OP_ERR / REM_OP_ERR, receive-side-memory.test.ts); a NIC
    // may name the receive's LOC_LEN_ERR: what counts here is that it failed, and woke b.
    const [r] = await collect(b.cq, 1);
    expect([r?.wrId, r?.status !== 'SUCCESS']).toEqual([90, true]);
    const [s] = await collect(a.cq, 1);
    expect([s?.wrId, s?.status !== 'SUCCESS']).toEqual([91, true]);
  });

  it('an unsolicited SEND is queued without an event; the next solicited one fires it', async () => {
    p = await make();
    const { b } = p;
    for (let i = 0; i < 2; i++) b.qp.postRecv({ wrId: 10 + i, sgList: [b.mr.sge(0, 8)] });
    const w = watch(b.cq);
    b.cq.requestNotify(NOTIFY_SOLICITED_ONLY); // the frozen constant: no options object read
    await send(p, 1, false);
    await turn();
    expect(w.events).toBe(0);
    expect(b.cq.pending()).toBe(1);
    await send(p, 2, true);
    await w.next;
    expect(w.events).toBe(1);
    expect(w.pendingAtEvent[0]).toBe(2);
    // Both are polled, in order: the unsolicited one was only queued.
    const wcs = allocCompletions(4);
    expect(b.cq.poll(wcs)).toBe(2);
    expect(wcs.slice(0, 2).map((wc) => [wc.wrId, wc.opcode, wc.status])).toEqual([
      [10, 'RECV', 'SUCCESS'],
      [11, 'RECV', 'SUCCESS'],
    ]);
  });

  it("the receiver's own send completions do not wake a solicited-only wait", async () => {
    p = await make();
    const { a, b } = p;
    a.qp.postRecv({ wrId: 20, sgList: [a.mr.sge(0, 8)] });
    b.qp.postRecv({ wrId: 21, sgList: [b.mr.sge(0, 8)] });
    let woke = false;
    const wait = b.cq.waitForCompletion({ timeoutMs: 10_000, solicitedOnly: true }).then(() => {
      woke = true;
    });
    // b sends (signaled): its completion lands in b's CQ, the one it waits on.
    b.qp.postSend({ wrId: 22, opcode: 'SEND', sgList: [b.mr.sge(8, 8)] });
    const got = await collect(a.cq, 1); // a has the receive, so b's send is done
    expect(got[0]?.wrId).toBe(20);
    await turn();
    expect(woke).toBe(false);
    // A solicited WRITE_WITH_IMM from a ends it; the send completion was queued meanwhile.
    a.qp.postSend({
      wrId: 23,
      opcode: 'RDMA_WRITE_WITH_IMM',
      imm: 7,
      sgList: [a.mr.sge(0, 8)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
      solicited: true,
    });
    await wait;
    expect(woke).toBe(true);
    const wcs = await collect(b.cq, 2);
    expect(wcs.map((wc) => [wc.wrId, wc.opcode])).toEqual([
      [22, 'SEND'],
      [21, 'RECV_RDMA_WITH_IMM'],
    ]);
    expect(wcs[1]?.imm).toBe(7);
  });

  it('a failed completion wakes a solicited-only arm (receives flushed by an error)', async () => {
    p = await make();
    const { b } = p;
    b.qp.postRecv({ wrId: 30, sgList: [b.mr.sge(0, 8)] });
    const wait = b.cq.waitForCompletion({ timeoutMs: 10_000, solicitedOnly: true });
    b.qp.toError();
    await wait;
    const [wc] = await collect(b.cq, 1);
    expect([wc?.wrId, wc?.status]).toEqual([30, 'WR_FLUSH_ERR']);
  });

  it('a wait for any completion on the same CQ is still woken by an unsolicited one', async () => {
    p = await make();
    const { b } = p;
    b.qp.postRecv({ wrId: 40, sgList: [b.mr.sge(0, 8)] });
    const solicited = b.cq.waitForCompletion({ timeoutMs: 10_000, solicitedOnly: true });
    const any = b.cq.waitForCompletion({ timeoutMs: 10_000, spinUs: 0 });
    await send(p, 41, false);
    await Promise.all([solicited, any]);
    expect((await collect(b.cq, 1))[0]?.wrId).toBe(40);
  });

  it('completions already there end a solicited-only wait at once', async () => {
    p = await make();
    const { b } = p;
    b.qp.postRecv({ wrId: 50, sgList: [b.mr.sge(0, 8)] });
    await send(p, 51, false);
    await b.cq.waitForCompletion({ timeoutMs: 10_000, solicitedOnly: true });
    expect(b.cq.pending()).toBe(1);
  });

  it('solicitedOnly must be a boolean', async () => {
    p = await make();
    const { cq } = p.b;
    expect(() => cq.requestNotify({ solicitedOnly: 1 as never })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => cq.requestNotify({ solicited: true } as never)).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => cq.waitForCompletion({ solicitedOnly: 'yes' as never })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
  });
});

// The soft TCP link wakes this device's CQs in the read callback that produced the
// completions (wakeOwed, once the read's frames ran), not in a second callback after the
// loop's I/O: one batch per read, nested handlers that may post right back (the post goes
// out through the link from inside that read), completions in CQ order, and a handler that
// throws reaches the process without breaking the link's reader. The read's last frame takes
// those wake-ups in its own respondFrame crossing (what needs a call into JS, such as a CQ
// overrun's event, is kept for wakeOwed), and a loop-fed CQ's empty poll arms it for the
// wait that follows (no armCq crossing); every wait still ends at its completion.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { allocCompletions, type CompletionQueue, type WorkCompletion } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import { linkPair, type Pair, providers, type Side, until } from './harness/pair.js';
import { type AddonWatch, watchAddon } from './harness/watchAddon.js';

/** Polls everything there is into copies. */
function drain(cq: CompletionQueue, wcs: WorkCompletion[]): WorkCompletion[] {
  const out: WorkCompletion[] = [];
  for (let n = cq.poll(wcs); n > 0; n = cq.poll(wcs))
    for (let i = 0; i < n; i++) out.push({ ...(wcs[i] as WorkCompletion) });
  return out;
}

/** respondFrame calls asked to take their read's wake-ups (FRAME_IN_WAKE), and what each answered. */
function watchFrameWakes(): { watch: AddonWatch; asked: number[] } {
  const asked: number[] = [];
  const watch = watchAddon({
    // The input word is consumed by the call: read before it.
    before: (name, args) =>
      name === 'respondFrame' ? (args[0] as Float64Array)[ABI.FRAME_IN_WAKE] : undefined,
    after: (name, args, _r, wake) => {
      if (name === 'respondFrame' && wake === 1)
        asked.push((args[0] as Float64Array)[ABI.FRAME_READY] as number);
    },
  });
  return { watch, asked };
}

/** Takes one receive on `s` as a waiting application does: poll, else wait (bounded). */
async function receive(s: Side, wcs: WorkCompletion[]): Promise<WorkCompletion> {
  for (;;) {
    const n = s.cq.poll(wcs);
    for (let i = 0; i < n; i++) {
      const c = wcs[i] as WorkCompletion;
      if (c.status !== 'SUCCESS') throw new Error(`completion ${c.opcode} ${c.status}`);
      if (c.opcode === 'RECV') return c;
    }
    await s.cq.waitForCompletion({ timeoutMs: 5000 });
  }
}

/** A SEND of 8 bytes from `s`. */
function send(s: Side, wrId: number): void {
  s.qp.postSend({ wrId, opcode: 'SEND', sgList: [s.mr.sge(1024, 8)] });
}

describe.runIf(providers.includes('soft'))('soft TCP link: wake-ups in the read callback', () => {
  let p: Pair | undefined;
  let w: AddonWatch | undefined;
  afterEach(() => {
    w?.restore();
    w = undefined;
    p?.close();
    p = undefined;
  });

  it("a SEND's receive completion reaches its CQ's 'completion' listener inside the read that carried it", async () => {
    // True from a respondFrame (a request of the read being handled) until that callback's
    // synchronous part ends: a listener that sees it ran in the read's own turn.
    let inRead = false;
    const readOver = () => {
      inRead = false;
    };
    w = watchAddon({
      before: (name) => {
        if (name !== 'respondFrame' && name !== 'respond') return;
        if (!inRead) queueMicrotask(readOver);
        inRead = true;
      },
    });
    p = await linkPair();
    const { a, b } = p;
    b.qp.postRecv({ wrId: 7, sgList: [b.mr.sge(0, 64)] });
    const seen: { nested: boolean; wcs: WorkCompletion[] }[] = [];
    const wcs = allocCompletions(8);
    b.cq.on('completion', () => seen.push({ nested: inRead, wcs: drain(b.cq, wcs) }));
    b.cq.requestNotify();
    a.mr.bytes.set([1, 2, 3, 4], 0);
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 4)] });
    await until(() => seen.length > 0, 'the completion event');
    expect(seen).toHaveLength(1);
    expect(seen[0]?.nested).toBe(true);
    expect(seen[0]?.wcs.map((c) => [c.opcode, c.wrId, c.byteLen])).toEqual([['RECV', 7, 4]]);
    expect([...b.mr.bytes.subarray(0, 4)]).toEqual([1, 2, 3, 4]);
  });

  it('handlers that post right back from inside the read run a ping-pong in order', async () => {
    p = await linkPair({ maxSendWr: 64, maxRecvWr: 64, cqCapacity: 512 });
    const { a, b } = p;
    const ROUNDS = 300;
    let failed: string | undefined;
    // Each side answers every RECV with a SEND carrying the next number, from its
    // 'completion' handler (re-armed there): the post goes into the link while the read
    // that woke it is still on the stack.
    const serve = (s: Side, name: string, parity: number) => {
      const st = { got: [] as number[], sendsDone: 0, send: (_v: number): void => undefined };
      const wcs = allocCompletions(16);
      const view = new DataView(s.mr.bytes.buffer, s.mr.bytes.byteOffset);
      for (let k = 0; k < 8; k++) s.qp.postRecv({ wrId: k, sgList: [s.mr.sge(64 * k, 64)] });
      st.send = (v: number) => {
        view.setUint32(1024, v, true);
        s.qp.postSend({ wrId: v, opcode: 'SEND', signaled: true, sgList: [s.mr.sge(1024, 4)] });
      };
      s.cq.on('completion', () => {
        for (const c of drain(s.cq, wcs)) {
          if (c.status !== 'SUCCESS') failed ??= `${name}: ${c.status}`;
          if (c.opcode === 'SEND') {
            // The sends of one QP complete in post order.
            if (c.wrId !== st.sendsDone * 2 + parity) failed ??= `${name}: send ${c.wrId}`;
            st.sendsDone++;
            continue;
          }
          const slot = c.wrId as number;
          const v = view.getUint32(64 * slot, true);
          st.got.push(v);
          s.qp.postRecv({ wrId: slot, sgList: [s.mr.sge(64 * slot, 64)] });
          if (v + 1 < 2 * ROUNDS) st.send(v + 1);
        }
        s.cq.requestNotify();
      });
      s.cq.requestNotify();
      return st;
    };
    const sa = serve(a, 'a', 0);
    const sb = serve(b, 'b', 1);
    sa.send(0);
    await until(() => sa.got.length === ROUNDS && sb.sendsDone === ROUNDS, 'the ping-pong', 20_000);
    expect(failed).toBeUndefined();
    expect(sb.got).toEqual(Array.from({ length: ROUNDS }, (_, k) => 2 * k));
    expect(sa.got).toEqual(Array.from({ length: ROUNDS }, (_, k) => 2 * k + 1));
  });

  it('a handler that closes its device inside the read ends the link quietly', async () => {
    p = await linkPair();
    const { a, b } = p;
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 64)] });
    let closed = false;
    b.cq.on('completion', () => {
      b.dev.close();
      closed = true;
    });
    b.cq.requestNotify();
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await until(() => closed, 'the close from the handler');
    expect(b.dev.closed).toBe(true);
    // The initiator's side stays usable: its QP fails or completes, typed, never a crash.
    a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    const wcs = allocCompletions(4);
    const seen: WorkCompletion[] = [];
    await until(
      () => {
        seen.push(...drain(a.cq, wcs));
        return seen.some((c) => c.wrId === 2);
      },
      "the initiator's second send to end",
      20_000,
    );
    // Its peer is gone: the send fails (typed status), it does not hang or succeed.
    expect(seen.find((c) => c.wrId === 2)?.status).not.toBe('SUCCESS');
    expect(a.qp.state).toBe('error');
  });

  it("a read's burst wakes the waiter once with every completion there, in order", async () => {
    p = await linkPair({ maxSendWr: 64, maxRecvWr: 64 });
    const { a, b } = p;
    const K = 48;
    for (let k = 0; k < K; k++) b.qp.postRecv({ wrId: k, sgList: [b.mr.sge(64 * k, 64)] });
    const wcs = allocCompletions(64);
    const recvs: WorkCompletion[] = [];
    const waiting = (async () => {
      while (recvs.length < K) {
        recvs.push(...drain(b.cq, wcs));
        if (recvs.length < K) await b.cq.waitForCompletion({ timeoutMs: 5000 });
      }
    })();
    a.qp.postSend(
      Array.from({ length: K }, (_, k) => ({
        wrId: k,
        opcode: 'SEND_WITH_IMM' as const,
        imm: 1000 + k,
        signaled: k === K - 1,
        sgList: [a.mr.sge(0, 8)],
      })),
    );
    await waiting;
    expect(recvs.map((c) => [c.wrId, c.imm, c.status])).toEqual(
      Array.from({ length: K }, (_, k) => [k, 1000 + k, 'SUCCESS']),
    );
    await until(() => drain(a.cq, wcs).some((c) => c.wrId === K - 1), 'the last send completion');
  });

  it('a waiting ping-pong is woken through respondFrame, in order, without a wakeOwed per round trip', async () => {
    const f = watchFrameWakes();
    w = f.watch;
    p = await linkPair({ maxSendWr: 64, maxRecvWr: 64 });
    const { a, b } = p;
    const ROUNDS = 200;
    for (const s of [a, b])
      for (let k = 0; k < 8; k++) s.qp.postRecv({ wrId: k, sgList: [s.mr.sge(64 * k, 64)] });
    const sendValue = (s: Side, v: number) => {
      new DataView(s.mr.bytes.buffer, s.mr.bytes.byteOffset).setUint32(1024, v, true);
      send(s, v);
    };
    const got: number[] = [];
    // b echoes v + 1 for every v; a checks each answer before it sends the next.
    const echo = (async () => {
      const wcs = allocCompletions(8);
      for (let k = 0; k < ROUNDS; k++) {
        const slot = (await receive(b, wcs)).wrId as number;
        const v = new DataView(b.mr.bytes.buffer, b.mr.bytes.byteOffset).getUint32(64 * slot, true);
        b.qp.postRecv({ wrId: slot, sgList: [b.mr.sge(64 * slot, 64)] });
        sendValue(b, v + 1);
      }
    })();
    const wcs = allocCompletions(8);
    const before = w.calls.get('wakeOwed') ?? 0;
    for (let k = 0; k < ROUNDS; k++) {
      sendValue(a, 2 * k);
      const slot = (await receive(a, wcs)).wrId as number;
      got.push(new DataView(a.mr.bytes.buffer, a.mr.bytes.byteOffset).getUint32(64 * slot, true));
      a.qp.postRecv({ wrId: slot, sgList: [a.mr.sge(64 * slot, 64)] });
    }
    await echo;
    expect(got).toEqual(Array.from({ length: ROUNDS }, (_, k) => 2 * k + 1));
    // Each side's request ends its read nearly always (TCP may split or merge reads).
    expect(f.asked.length).toBeGreaterThan(ROUNDS);
    expect(f.asked.filter((n) => n >= 1).length).toBeGreaterThan(ROUNDS);
    expect((w.calls.get('wakeOwed') ?? 0) - before).toBeLessThan(ROUNDS / 4);
  });

  it('a CQ overrun found by the last frame is kept for wakeOwed: the event and the wake-up both arrive', async () => {
    const f = watchFrameWakes();
    w = f.watch;
    p = await linkPair({ cqCapacity: 4, maxRecvWr: 16, maxSendWr: 16 });
    const { a, b } = p;
    const events: string[] = [];
    b.cq.on('asyncEvent', (e) => events.push(e.type));
    b.qp.postRecv(
      Array.from({ length: 8 }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(i * 64, 64)] })),
    );
    // One at a time: each SEND is its read's last frame, the fifth overruns the CQ.
    for (let i = 0; i < 8 && !events.includes('CQ_ERR'); i++) {
      a.qp.postSend({ wrId: i, opcode: 'SEND', signaled: false, sgList: [a.mr.sge(0, 8)] });
      await until(() => b.cq.pending() > i || events.includes('CQ_ERR'), `send ${i} received`);
    }
    await until(() => events.includes('CQ_ERR'), 'the CQ_ERR async event');
    expect(b.cq.overrun).toBe(true);
    expect(b.qp.state).toBe('error');
    // The overrun's frame could not hand its wake-ups over natively (an event to deliver).
    expect(f.asked).toContain(-1);
    expect(b.cq.pending()).toBe(b.cq.capacity);
  });

  it('poll-then-wait round trips need no armCq and each wait ends at its completion', async () => {
    w = watchAddon();
    p = await linkPair({ maxSendWr: 64, maxRecvWr: 64 });
    const { a, b } = p;
    const ROUNDS = 200;
    for (const s of [a, b])
      for (let k = 0; k < 16; k++) s.qp.postRecv({ wrId: k, sgList: [s.mr.sge(64 * k, 64)] });
    const echo = (async () => {
      const wcs = allocCompletions(8);
      for (let k = 0; k < ROUNDS; k++) {
        const slot = (await receive(b, wcs)).wrId as number;
        b.qp.postRecv({ wrId: slot, sgList: [b.mr.sge(64 * slot, 64)] });
        send(b, k);
      }
    })();
    const wcs = allocCompletions(8);
    const arms = w.calls.get('armCq') ?? 0;
    for (let k = 0; k < ROUNDS; k++) {
      send(a, k);
      const slot = (await receive(a, wcs)).wrId as number;
      a.qp.postRecv({ wrId: slot, sgList: [a.mr.sge(64 * slot, 64)] });
    }
    await echo;
    // Without the arming poll every wait called armCq: about 2 × ROUNDS.
    expect((w.calls.get('armCq') ?? 0) - arms).toBeLessThan(ROUNDS / 4);
  });

  it('a completion that came after the arming poll ends the next wait at once', async () => {
    p = await linkPair();
    const { a, b } = p;
    for (let k = 0; k < 4; k++) b.qp.postRecv({ wrId: k, sgList: [b.mr.sge(64 * k, 64)] });
    const wcs = allocCompletions(8);
    // The habit: a wait right after an empty poll.
    expect(b.cq.poll(wcs)).toBe(0);
    const first = b.cq.waitForCompletion({ timeoutMs: 5000 });
    send(a, 1);
    await first;
    expect(b.cq.poll(wcs)).toBe(1);
    // This empty poll arms; the SEND then arrives and is delivered with nobody waiting.
    expect(b.cq.poll(wcs)).toBe(0);
    send(a, 2);
    await until(() => b.cq.pending() === 1, 'the second receive');
    await b.cq.waitForCompletion({ timeoutMs: 5000 });
    expect(b.cq.poll(wcs)).toBe(1);
    expect(wcs[0]?.opcode).toBe('RECV');
  });
});

const fixture = fileURLToPath(new URL('./fixtures/link-throwing-handler.ts', import.meta.url));

it.runIf(providers.includes('soft'))(
  "a 'completion' handler that throws inside the read reaches uncaughtException; the link keeps reading",
  () => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', fixture], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    const r = JSON.parse(out.trim().split('\n').pop() as string) as {
      uncaught: string[];
      received: number[];
    };
    expect(r.uncaught).toEqual(['handler threw 0']);
    expect(r.received).toEqual([0, 1, 2, 3, 4]);
  },
);

const twoCq = fileURLToPath(new URL('./fixtures/two-cq-throwing-handler.ts', import.meta.url));

describe.runIf(providers.includes('soft'))(
  "'completion' handlers of a send and a recv CQ that both throw (one wake-up readies both)",
  () => {
    it.each(['link', 'shm'])('over %s every CQ of a batch is still notified', (mode) => {
      const out = execFileSync(process.execPath, ['--import', 'tsx', twoCq, mode], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      const r = JSON.parse(out.trim().split('\n').pop() as string) as {
        bRecv: number;
        bSendDone: number;
        uncaught: string[];
        rounds: number;
      };
      expect(r).toEqual({
        bRecv: r.rounds,
        bSendDone: r.rounds,
        uncaught: ['recv cq threw', 'send cq threw'],
        rounds: 300,
      });
    });
  },
);

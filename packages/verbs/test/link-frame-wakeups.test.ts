// The read's last frame takes that read's wake-ups in its own respondFrame crossing
// (FRAME_IN_WAKE → FRAME_READY), not in a wakeOwed crossing after it: a waiter's ping-pong
// over the link costs one crossing less per round trip and side. What respondFrame cannot
// hand over without calling into JS (an async event such as a CQ overrun) is kept and
// delivered by wakeOwed, in the same read callback.
import { afterEach, describe, expect, it } from 'vitest';
import { allocCompletions, type WorkCompletion } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import { linkPair, type Pair, providers, type Side, until } from './harness/pair.js';
import { type AddonWatch, watchAddon } from './harness/watchAddon.js';

/** respondFrame calls asked to take their read's wake-ups, and what each answered. */
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

/** Receives one message on `s` as a waiting application does: poll, else wait. */
async function receive(s: Side, wcs: WorkCompletion[]): Promise<void> {
  for (;;) {
    const n = s.cq.poll(wcs);
    for (let i = 0; i < n; i++) {
      const c = wcs[i] as WorkCompletion;
      if (c.status !== 'SUCCESS') throw new Error(`completion ${c.opcode} ${c.status}`);
      if (c.opcode === 'RECV') return;
    }
    await s.cq.waitForCompletion({ timeoutMs: 5000 });
  }
}

describe.runIf(providers.includes('soft'))(
  "soft TCP link: a read's last frame takes its wake-ups",
  () => {
    let p: Pair | undefined;
    let w: AddonWatch | undefined;
    afterEach(() => {
      w?.restore();
      w = undefined;
      p?.close();
      p = undefined;
    });

    it('a waiting ping-pong is woken through respondFrame, in order, without a wakeOwed per round trip', async () => {
      const f = watchFrameWakes();
      w = f.watch;
      p = await linkPair({ maxSendWr: 64, maxRecvWr: 64 });
      const { a, b } = p;
      const ROUNDS = 200;
      for (const s of [a, b])
        for (let k = 0; k < 8; k++) s.qp.postRecv({ wrId: k, sgList: [s.mr.sge(64 * k, 64)] });
      const send = (s: Side, v: number) => {
        new DataView(s.mr.bytes.buffer, s.mr.bytes.byteOffset).setUint32(1024, v, true);
        s.qp.postSend({ wrId: v, opcode: 'SEND', sgList: [s.mr.sge(1024, 4)] });
      };
      const got: number[] = [];
      // b echoes v + 1 for every v; a checks each answer before it sends the next.
      const echo = (async () => {
        const wcs = allocCompletions(8);
        for (let k = 0; k < ROUNDS; k++) {
          await receive(b, wcs);
          const slot = wcs.find((c) => c.opcode === 'RECV')?.wrId as number;
          const v = new DataView(b.mr.bytes.buffer, b.mr.bytes.byteOffset).getUint32(
            64 * slot,
            true,
          );
          b.qp.postRecv({ wrId: slot, sgList: [b.mr.sge(64 * slot, 64)] });
          send(b, v + 1);
        }
      })();
      const wcs = allocCompletions(8);
      const before = w.calls.get('wakeOwed') ?? 0;
      for (let k = 0; k < ROUNDS; k++) {
        send(a, 2 * k);
        await receive(a, wcs);
        const slot = wcs.find((c) => c.opcode === 'RECV')?.wrId as number;
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
  },
);

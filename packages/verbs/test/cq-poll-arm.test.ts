// A loop-fed CQ (every QP on it over the soft TCP link) whose user waits right after an
// empty poll is armed by that poll, in its crossing: the wait then needs no armCq. What a
// user sees does not change: every wait still ends at the next completion, one that came
// between the poll and the wait ends the wait at once. (A poll never re-arms while a wake-up
// is requested: that arm, solicited-only maybe, stays as it was.)
import { afterEach, describe, expect, it } from 'vitest';
import { allocCompletions, type WorkCompletion } from '../src/index.js';
import { linkPair, type Pair, providers, type Side, until } from './harness/pair.js';
import { type AddonWatch, watchAddon } from './harness/watchAddon.js';

const wcs = allocCompletions(8);

function send(s: Side, wrId: number): void {
  s.qp.postSend({ wrId, opcode: 'SEND', sgList: [s.mr.sge(1024, 8)] });
}

/** Polls until a RECV is taken, waiting (bounded) whenever the CQ is empty. */
async function receive(s: Side): Promise<number> {
  for (;;) {
    const n = s.cq.poll(wcs);
    for (let i = 0; i < n; i++) {
      const c = wcs[i] as WorkCompletion;
      if (c.status !== 'SUCCESS') throw new Error(`completion ${c.opcode} ${c.status}`);
      if (c.opcode === 'RECV') return c.wrId as number;
    }
    await s.cq.waitForCompletion({ timeoutMs: 5000 });
  }
}

describe.runIf(providers.includes('soft'))(
  'soft TCP link: a poll arms for the wait after it',
  () => {
    let p: Pair | undefined;
    let w: AddonWatch | undefined;
    afterEach(() => {
      w?.restore();
      w = undefined;
      p?.close();
      p = undefined;
    });

    it('poll-then-wait round trips need no armCq and each wait ends at its completion', async () => {
      w = watchAddon();
      p = await linkPair({ maxSendWr: 64, maxRecvWr: 64 });
      const { a, b } = p;
      const ROUNDS = 200;
      for (const s of [a, b])
        for (let k = 0; k < 16; k++) s.qp.postRecv({ wrId: k, sgList: [s.mr.sge(64 * k, 64)] });
      const echo = (async () => {
        for (let k = 0; k < ROUNDS; k++) {
          const slot = await receive(b);
          b.qp.postRecv({ wrId: slot, sgList: [b.mr.sge(64 * slot, 64)] });
          send(b, k);
        }
      })();
      const arms = w.calls.get('armCq') ?? 0;
      for (let k = 0; k < ROUNDS; k++) {
        send(a, k);
        const slot = await receive(a);
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
  },
);

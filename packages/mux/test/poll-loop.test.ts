// The adaptive poll loop's benefit bound with many messages in flight: activity never stops,
// but the CQ polled on holds nothing. Spinning must stop paying (worth 0) and probes stay rare.
import { expect, it } from 'vitest';
import { PollEntry, PollLoop } from '../src/internal/PollLoop.js';

/** A CQ that never holds a completion; counts its sleeps. */
function emptyCq(): { cq: { pending(): number; drain(): void; sleep(): void }; sleeps: number } {
  const s = {
    sleeps: 0,
    cq: {
      pending: () => 0,
      drain: () => {},
      sleep: () => {
        s.sleeps++;
      },
    },
  };
  return s;
}

const turn = () => new Promise<void>((r) => setImmediate(r));

it('a CQ polled in vain under constant activity loses its worth and sleeps', async () => {
  const loop = new PollLoop(50);
  const s = emptyCq();
  const e = new PollEntry(s.cq);
  expect(e.worth).toBe(8);
  // A send every turn for up to 200 ms (a sender with many messages in flight): before, each
  // kept the stay fresh at full worth, so it was polled for as long as the sends went on.
  const until = performance.now() + 200;
  while (performance.now() < until && e.worth > 0) {
    loop.activity(e);
    await turn();
  }
  expect(e.worth).toBe(0);
  // Activity no longer extends the stay: it ends within spinUs (plus the turns around it).
  for (let i = 0; i < 1000 && e.polled; i++) await turn();
  expect(e.polled).toBe(false);
  expect(s.sleeps).toBeGreaterThan(0);
});

it('at worth 0, activity enters the loop at most once per 64 spinUs however often it comes', async () => {
  const loop = new PollLoop(50);
  const s = emptyCq();
  const e = new PollEntry(s.cq);
  e.worth = 0;
  let entered = 0;
  const t0 = performance.now();
  // 3 200 activities within a few ms, each probe's stay ended at once (removed): every 32nd
  // would have entered (100 probes).
  for (let i = 0; i < 3200; i++) {
    if (loop.activity(e)) {
      entered++;
      loop.remove(e);
    }
  }
  const ms = performance.now() - t0;
  expect(entered).toBeGreaterThanOrEqual(1);
  expect(entered).toBeLessThanOrEqual(1 + Math.floor(ms / 3.2));
  loop.remove(e);
});

it('a stay spins a few times the delay its receives came after, within spinUs / 8 … spinUs', () => {
  const spinMs = 0.05;
  const budget = (delayMs: number) => {
    const e = new PollEntry({ pending: () => 0, drain: () => {}, sleep: () => {} });
    e.measure(delayMs, spinMs);
    return e.budgetMs;
  };
  expect(budget(0)).toBeCloseTo(spinMs / 8);
  expect(budget(0.01)).toBeCloseTo(0.03);
  expect(budget(1)).toBe(spinMs);
  // A moving average: one late receive does not undo many early ones at once.
  const e = new PollEntry({ pending: () => 0, drain: () => {}, sleep: () => {} });
  for (let i = 0; i < 8; i++) e.measure(0, spinMs);
  e.measure(1, spinMs);
  expect(e.delayMs).toBeCloseTo(0.25);
});

it('receives that are there at once shrink the spin of a CQ to its least, not to nothing', async () => {
  const loop = new PollLoop(50);
  let pending = 0;
  const e: PollEntry = new PollEntry({
    pending: () => pending,
    drain: () => {
      pending = 0;
      loop.received(e);
    },
    sleep: () => {},
  });
  expect(e.budgetMs).toBe(-1); // spinUs until measured
  // Many messages in flight: every turn after a send finds the next receive waiting.
  for (let i = 0; i < 20; i++) {
    loop.activity(e);
    pending = 1;
    await turn();
  }
  expect(e.catches).toBe(20);
  expect(e.worth).toBe(8); // spinning paid: it goes on, only shorter
  expect(e.budgetMs).toBeCloseTo(0.05 / 8);
  for (let i = 0; i < 1000 && e.polled; i++) await turn();
  expect(e.polled).toBe(false);
});

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock, SendWindow, SharedBudget } from '../src/index.js';
import { expectCode, flush, type Tracked, track } from './helpers.js';

describe('SharedBudget across connections', () => {
  it('bounds the bytes and messages of all its windows together', () => {
    const budget = new SharedBudget({ maxBytes: 100, maxMessages: 3 });
    const a = new SendWindow({ maxBytes: 80, maxMessages: 10, budget });
    const b = new SendWindow({ maxBytes: 80, maxMessages: 10, budget });
    expect(a.tryAcquire(60)).toBe(true);
    expect(b.tryAcquire(60)).toBe(false); // fits b's own window, not the budget
    expect(b.tryAcquire(40)).toBe(true);
    expect(budget.bytesInFlight).toBe(100);
    expect(a.tryAcquire(0)).toBe(true);
    expect(b.tryAcquire(0)).toBe(false); // 3 messages: the budget's message bound
    expect(budget.stats()).toMatchObject({ maxBytesInFlight: 100, maxMessagesInFlight: 3 });
    expect(b.stats().budgetStalls).toBe(2);
  });

  it("wakes a window refused by the budget with 'drain' when another window releases", () => {
    const budget = new SharedBudget({ maxBytes: 100, maxMessages: 10 });
    const a = new SendWindow({ maxBytes: 100, maxMessages: 10, budget });
    const b = new SendWindow({ maxBytes: 100, maxMessages: 10, budget });
    let bDrains = 0;
    b.on('drain', () => {
      bDrains++;
    });
    a.tryAcquire(90);
    expect(b.tryAcquire(20)).toBe(false);
    a.release(90);
    expect(bDrains).toBe(1);
    expect(b.tryAcquire(20)).toBe(true);
  });

  it('serves windows queued on the budget fairly by bytes', async () => {
    const budget = new SharedBudget({ maxBytes: 64 * 1024, maxMessages: 1000, quantumBytes: 4096 });
    const clock = new ManualClock();
    const big = new SendWindow({ maxBytes: 1 << 20, maxMessages: 1000, budget, clock });
    const small = new SendWindow({ maxBytes: 1 << 20, maxMessages: 1000, budget, clock });
    const blocker = new SendWindow({ maxBytes: 1 << 20, maxMessages: 1000, budget, clock });
    blocker.tryAcquire(64 * 1024);
    const order: { w: 'big' | 'small'; bytes: number }[] = [];
    for (let i = 0; i < 40; i++) {
      big.acquire(16 * 1024, { timeoutMs: 1e9 }).then(() => order.push({ w: 'big', bytes: 16384 }));
    }
    for (let i = 0; i < 2560; i++) {
      small.acquire(256, { timeoutMs: 1e9 }).then(() => order.push({ w: 'small', bytes: 256 }));
    }
    blocker.release(64 * 1024);
    let done = 0;
    while (done < 2600) {
      await flush();
      const upto = order.length;
      expect(upto).toBeGreaterThan(done);
      for (; done < upto; done++) {
        const d = order[done] as { w: 'big' | 'small'; bytes: number };
        (d.w === 'big' ? big : small).release(d.bytes);
      }
    }
    const half = order.slice(0, 1300);
    const bigBytes = half.filter((d) => d.w === 'big').reduce((s, d) => s + d.bytes, 0);
    const smallBytes = half.filter((d) => d.w === 'small').reduce((s, d) => s + d.bytes, 0);
    expect(bigBytes / smallBytes).toBeGreaterThan(0.8);
    expect(bigBytes / smallBytes).toBeLessThan(1.25);
  });

  it('gives a destroyed window’s outstanding space back to the budget', async () => {
    const budget = new SharedBudget({ maxBytes: 100, maxMessages: 10 });
    const clock = new ManualClock();
    const a = new SendWindow({ maxBytes: 100, maxMessages: 10, budget, clock });
    const b = new SendWindow({ maxBytes: 100, maxMessages: 10, budget, clock });
    a.tryAcquire(100);
    const t = track(b.acquire(50));
    a.destroy(new Error('qp failed'));
    await flush();
    expect(t.state).toBe('resolved');
    expect(budget.bytesInFlight).toBe(50);
    a.release(100); // ignored after destroy: no double give-back
    expect(budget.bytesInFlight).toBe(50);
  });

  it('rejects a message larger than the budget with ERR_FLOWCTL_TOO_LARGE', () => {
    const budget = new SharedBudget({ maxBytes: 10, maxMessages: 1 });
    const w = new SendWindow({ maxBytes: 100, maxMessages: 10, budget });
    expectCode(() => w.tryAcquire(11), 'ERR_FLOWCTL_TOO_LARGE');
    expectCode(() => new SharedBudget({ maxBytes: -1, maxMessages: 1 }), 'ERR_FLOWCTL_INVALID_ARG');
  });

  it('never lets the windows together exceed the budget, and every wait ends', async () => {
    const op = fc.oneof(
      fc.record({
        t: fc.constant('acquire' as const),
        win: fc.nat(),
        bytes: fc.integer({ min: 0, max: 50 }),
        channel: fc.integer({ min: 0, max: 2 }),
        timeout: fc.integer({ min: 0, max: 30 }),
      }),
      fc.record({
        t: fc.constant('try' as const),
        win: fc.nat(),
        bytes: fc.integer({ min: 0, max: 50 }),
      }),
      fc.record({ t: fc.constant('release' as const), i: fc.nat() }),
      fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 15 }) }),
      fc.record({ t: fc.constant('abort' as const), i: fc.nat() }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 4 }),
        fc.integer({ min: 50, max: 150 }),
        fc.integer({ min: 1, max: 8 }),
        fc.array(op, { maxLength: 80 }),
        async (windows, budgetBytes, budgetMessages, ops) => {
          const clock = new ManualClock();
          const budget = new SharedBudget({
            maxBytes: budgetBytes,
            maxMessages: budgetMessages,
            quantumBytes: 16,
          });
          const ws = Array.from(
            { length: windows },
            () => new SendWindow({ maxBytes: 80, maxMessages: 4, budget, clock, quantumBytes: 8 }),
          );
          const inFlight: { win: number; bytes: number }[] = [];
          const waits: {
            t: Tracked;
            win: number;
            bytes: number;
            ac: AbortController;
            counted: boolean;
          }[] = [];
          const observe = (): void => {
            for (const q of waits) {
              if (q.t.state === 'resolved' && !q.counted) {
                q.counted = true;
                inFlight.push({ win: q.win, bytes: q.bytes });
              }
            }
            expect(budget.bytesInFlight).toBe(inFlight.reduce((s, f) => s + f.bytes, 0));
            expect(budget.bytesInFlight).toBeLessThanOrEqual(budgetBytes);
            expect(budget.messagesInFlight).toBeLessThanOrEqual(budgetMessages);
            ws.forEach((w, i) => {
              const mine = inFlight.filter((f) => f.win === i);
              expect(w.bytesInFlight).toBe(mine.reduce((s, f) => s + f.bytes, 0));
              expect(w.bytesInFlight).toBeLessThanOrEqual(80);
              expect(w.messagesInFlight).toBeLessThanOrEqual(4);
            });
          };
          for (const o of ops) {
            if (o.t === 'acquire' || o.t === 'try') {
              const win = o.win % windows;
              const w = ws[win] as SendWindow;
              const bytes = Math.min(o.bytes, w.maxMessageBytes);
              if (o.t === 'try') {
                if (w.tryAcquire(bytes)) inFlight.push({ win, bytes });
              } else {
                const ac = new AbortController();
                const p = w.acquire(bytes, {
                  channel: o.channel,
                  timeoutMs: o.timeout,
                  signal: ac.signal,
                });
                waits.push({ t: track(p), win, bytes, ac, counted: false });
              }
            } else if (o.t === 'release') {
              if (inFlight.length > 0) {
                const [f] = inFlight.splice(o.i % inFlight.length, 1);
                if (f !== undefined) (ws[f.win] as SendWindow).release(f.bytes);
              }
            } else if (o.t === 'advance') {
              clock.advance(o.ms);
            } else if (waits.length > 0) {
              waits[o.i % waits.length]?.ac.abort();
            }
            await flush();
            observe();
          }
          for (let round = 0; round < 200 && waits.some((q) => q.t.state === 'pending'); round++) {
            while (inFlight.length > 0) {
              const f = inFlight.shift() as { win: number; bytes: number };
              (ws[f.win] as SendWindow).release(f.bytes);
            }
            clock.advance(1);
            await flush();
            observe();
          }
          for (const q of waits) expect(q.t.state).not.toBe('pending');
          expect(budget.stats().waitingWindows).toBe(0);
        },
      ),
      { numRuns: 150 },
    );
  });
});

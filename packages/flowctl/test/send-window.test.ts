import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ManualClock, SendWindow, SharedBudget } from '../src/index.js';
import { expectCode, flush, type Tracked, track } from './helpers.js';

describe('SendWindow', () => {
  it('bounds outstanding bytes and messages and gives space back on release', () => {
    const w = new SendWindow({ maxBytes: 100, maxMessages: 3 });
    expect(w.tryAcquire(60)).toBe(true);
    expect(w.tryAcquire(50)).toBe(false); // bytes
    expect(w.tryAcquire(40)).toBe(true);
    expect(w.tryAcquire(0)).toBe(true);
    expect(w.tryAcquire(0)).toBe(false); // messages
    expect(w.bytesInFlight).toBe(100);
    expect(w.messagesInFlight).toBe(3);
    w.release(60);
    expect(w.tryAcquire(50)).toBe(true);
    expect(w.stats()).toMatchObject({ maxBytesInFlight: 100, maxMessagesInFlight: 3, sent: 4 });
  });

  it("backpressures the undici way: false, then 'drain' once that size fits", () => {
    const w = new SendWindow({ maxBytes: 100, maxMessages: 10 });
    let drains = 0;
    w.on('drain', () => {
      drains++;
    });
    w.tryAcquire(50);
    w.tryAcquire(40); // 90 in flight
    expect(w.tryAcquire(30)).toBe(false);
    w.release(40); // 50 in flight: 30 fits
    expect(drains).toBe(1);
    expect(w.tryAcquire(50)).toBe(true); // 100 in flight
    expect(w.tryAcquire(20)).toBe(false);
    expect(w.tryAcquire(80)).toBe(false); // drain now waits for the larger refused size
    w.release(50); // 20 would fit, 80 would not
    expect(drains).toBe(1);
    w.release(50);
    expect(drains).toBe(2);
  });

  it('throws ERR_FLOWCTL_TOO_LARGE for a message bigger than the whole window, never hangs', () => {
    const w = new SendWindow({ maxBytes: 100, maxMessages: 4 });
    expectCode(() => w.tryAcquire(101), 'ERR_FLOWCTL_TOO_LARGE');
    expectCode(() => w.acquire(101), 'ERR_FLOWCTL_TOO_LARGE');
    const budget = new SharedBudget({ maxBytes: 50, maxMessages: 8 });
    const wb = new SendWindow({ maxBytes: 100, maxMessages: 4, budget });
    expect(wb.maxMessageBytes).toBe(50);
    expectCode(() => wb.acquire(60), 'ERR_FLOWCTL_TOO_LARGE');
  });

  it('throws ERR_FLOWCTL_INVALID_ARG for negative, fractional or non-numeric sizes', () => {
    const w = new SendWindow({ maxBytes: 100, maxMessages: 4 });
    for (const bad of [-1, 1.5, Number.NaN, '10' as unknown as number]) {
      expectCode(() => w.tryAcquire(bad), 'ERR_FLOWCTL_INVALID_ARG');
      expectCode(() => w.acquire(bad), 'ERR_FLOWCTL_INVALID_ARG');
    }
    expectCode(() => w.acquire(1, { channel: -1 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => w.release(1), 'ERR_FLOWCTL_INVALID_ARG'); // nothing outstanding
    w.tryAcquire(10);
    expectCode(() => w.release(11), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => new SendWindow({ maxBytes: 0, maxMessages: 1 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => new SendWindow({ maxBytes: 1, maxMessages: 0 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(
      () => new SendWindow({ maxBytes: 1, maxMessages: 1, budget: {} as SharedBudget }),
      'ERR_FLOWCTL_INVALID_ARG',
    );
  });

  it('queues acquires, dispatches them as space frees, and lets tryAcquire not jump ahead', async () => {
    const clock = new ManualClock();
    const w = new SendWindow({ maxBytes: 100, maxMessages: 10, clock });
    w.tryAcquire(100);
    const a = track(w.acquire(30));
    const b = track(w.acquire(30));
    expect(w.queued).toBe(2);
    clock.advance(7);
    w.release(100);
    await flush();
    expect([a.state, b.state]).toEqual(['resolved', 'resolved']);
    expect(w.bytesInFlight).toBe(60);
    expect(w.stats()).toMatchObject({ timeBlockedMs: 14, maxQueueDepth: 2, windowStalls: 2 });
    w.release(30);
    w.release(30);
    w.tryAcquire(100);
    const c = track(w.acquire(10));
    w.release(100);
    // c is dispatched synchronously on release, before any newcomer
    expect(w.bytesInFlight).toBe(10);
    await flush();
    expect(c.state).toBe('resolved');
  });

  it('rejects a waiting send at its deadline and lets the next one through', async () => {
    const clock = new ManualClock();
    const w = new SendWindow({ maxBytes: 100, maxMessages: 10, clock });
    w.tryAcquire(50);
    const big = track(w.acquire(80, { timeoutMs: 10 }));
    const small = track(w.acquire(20, { timeoutMs: 100 }));
    await flush();
    // the big one holds the line: the small one waits behind it although it would fit
    expect(small.state).toBe('pending');
    clock.advance(10);
    await flush();
    expect(big.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
    expect(small.state).toBe('resolved');
    expect(w.stats().deadlineRejections).toBe(1);
  });

  it('rejects with ERR_FLOWCTL_QUEUE_FULL past maxQueued', async () => {
    const w = new SendWindow({
      maxBytes: 10,
      maxMessages: 1,
      maxQueued: 1,
      clock: new ManualClock(),
    });
    w.tryAcquire(1);
    w.acquire(1).catch(() => {});
    const t = track(w.acquire(1));
    await flush();
    expect(t.error?.code).toBe('ERR_FLOWCTL_QUEUE_FULL');
    expect(w.stats().queueFullRejections).toBe(1);
    w.close();
  });

  it('never has more in flight than its window, and every queued send is sent or rejected by its deadline', async () => {
    const op = fc.oneof(
      fc.record({ t: fc.constant('try' as const), bytes: fc.integer({ min: 0, max: 64 }) }),
      fc.record({
        t: fc.constant('acquire' as const),
        bytes: fc.integer({ min: 0, max: 64 }),
        channel: fc.integer({ min: 0, max: 3 }),
        timeout: fc.integer({ min: 0, max: 40 }),
      }),
      fc.record({ t: fc.constant('release' as const), i: fc.nat() }),
      fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 20 }) }),
      fc.record({ t: fc.constant('abort' as const), i: fc.nat() }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 64, max: 200 }),
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 1, max: 64 }),
        fc.array(op, { maxLength: 80 }),
        async (maxBytes, maxMessages, quantumBytes, ops) => {
          const clock = new ManualClock();
          const w = new SendWindow({ maxBytes, maxMessages, quantumBytes, clock });
          const inFlight: number[] = [];
          const waits: {
            t: Tracked;
            bytes: number;
            deadline: number;
            ac: AbortController;
            counted: boolean;
          }[] = [];
          const observe = (): void => {
            for (const q of waits) {
              if (q.t.state === 'resolved' && !q.counted) {
                q.counted = true;
                inFlight.push(q.bytes);
              }
              if (q.t.error?.code === 'ERR_FLOWCTL_DEADLINE') {
                expect(clock.now()).toBeGreaterThanOrEqual(q.deadline);
              }
            }
            const sum = inFlight.reduce((a, b) => a + b, 0);
            expect(w.bytesInFlight).toBe(sum);
            expect(w.messagesInFlight).toBe(inFlight.length);
            expect(w.bytesInFlight).toBeLessThanOrEqual(maxBytes);
            expect(w.messagesInFlight).toBeLessThanOrEqual(maxMessages);
          };
          for (const o of ops) {
            if (o.t === 'try') {
              if (w.tryAcquire(o.bytes)) inFlight.push(o.bytes);
            } else if (o.t === 'acquire') {
              const ac = new AbortController();
              const p = w.acquire(o.bytes, {
                channel: o.channel,
                timeoutMs: o.timeout,
                signal: ac.signal,
              });
              waits.push({
                t: track(p),
                bytes: o.bytes,
                deadline: clock.now() + o.timeout,
                ac,
                counted: false,
              });
            } else if (o.t === 'release') {
              if (inFlight.length > 0) {
                const [bytes] = inFlight.splice(o.i % inFlight.length, 1);
                w.release(bytes as number);
              }
            } else if (o.t === 'advance') {
              clock.advance(o.ms);
            } else if (waits.length > 0) {
              waits[o.i % waits.length]?.ac.abort();
            }
            await flush();
            observe();
          }
          // Drain: complete everything outstanding, repeatedly, and let deadlines pass.
          for (let round = 0; round < 200 && waits.some((q) => q.t.state === 'pending'); round++) {
            while (inFlight.length > 0) w.release(inFlight.shift() as number);
            clock.advance(1);
            await flush();
            observe();
          }
          for (const q of waits) {
            expect(q.t.state).not.toBe('pending');
            if (q.t.state === 'rejected') {
              expect(['ERR_FLOWCTL_DEADLINE', 'ERR_FLOWCTL_ABORTED']).toContain(q.t.error?.code);
            }
          }
          expect(w.queued).toBe(0);
        },
      ),
      { numRuns: 150 },
    );
  });
});

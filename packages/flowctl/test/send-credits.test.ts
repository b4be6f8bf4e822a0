import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FlowctlError, ManualClock, SendCredits } from '../src/index.js';
import { expectCode, flush, type Tracked, track } from './helpers.js';

describe('SendCredits', () => {
  it("says 'reserveAvailable' when a credit returns after an update found none", () => {
    const sc = new SendCredits({ initialCredits: 2 });
    let told = 0;
    sc.on('reserveAvailable', () => {
      told++;
      expect(sc.tryConsumeReserved()).toBe(true);
    });
    expect(sc.tryConsume()).toBe(true);
    expect(sc.tryConsumeReserved()).toBe(true);
    sc.grant(0);
    expect(told).toBe(0); // nobody waited yet
    expect(sc.tryConsumeReserved()).toBe(false);
    sc.grant(1);
    expect(told).toBe(1);
    sc.grant(1);
    expect(told).toBe(1); // once per failed attempt
  });

  it('keeps the reserved credit back from data and lets a credit update take it', () => {
    const sc = new SendCredits({ initialCredits: 3 });
    expect(sc.usable).toBe(2);
    expect(sc.tryConsume()).toBe(true);
    expect(sc.tryConsume()).toBe(true);
    expect(sc.tryConsume()).toBe(false);
    expect(sc.available).toBe(1);
    expect(sc.tryConsumeReserved()).toBe(true);
    expect(sc.available).toBe(0);
    expect(sc.tryConsumeReserved()).toBe(false);
    expect(sc.outstanding).toBe(3);
    expect(sc.stats()).toMatchObject({ consumed: 2, consumedReserved: 1, creditStalls: 1 });
  });

  it("emits 'drain' once after a refused tryConsume, when a data credit is free again", () => {
    const clock = new ManualClock();
    const sc = new SendCredits({ initialCredits: 3, clock });
    let drains = 0;
    sc.on('drain', () => {
      drains++;
    });
    sc.tryConsume();
    sc.tryConsume();
    sc.grant(0);
    expect(drains).toBe(0); // nobody was refused
    expect(sc.tryConsume()).toBe(false);
    clock.advance(5);
    sc.grant(0);
    expect(drains).toBe(0); // still nothing usable
    sc.grant(1);
    expect(drains).toBe(1);
    sc.grant(1);
    expect(drains).toBe(1);
    // the refused sender was blocked from the refusal to the drain
    expect(sc.stats()).toMatchObject({ creditStalls: 1, timeBlockedMs: 5 });
  });

  it('rejects a grant larger than what is outstanding as a protocol violation', () => {
    const sc = new SendCredits({ initialCredits: 4 });
    sc.tryConsume();
    expectCode(() => sc.grant(2), 'ERR_FLOWCTL_PROTOCOL');
    expectCode(() => sc.grant(-1), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => sc.grant(1.5), 'ERR_FLOWCTL_INVALID_ARG');
    sc.grant(1);
    expect(sc.available).toBe(4);
  });

  it('serves waiting acquires first-in first-out and lets nobody jump the queue', async () => {
    const clock = new ManualClock();
    const sc = new SendCredits({ initialCredits: 2, clock });
    expect(sc.tryConsume()).toBe(true);
    const first = track(sc.acquire({ timeoutMs: 100 }));
    const second = track(sc.acquire({ timeoutMs: 100 }));
    sc.grant(1);
    // a credit is free, but a waiter is queued: tryConsume must not take it first
    await flush();
    expect(first.state).toBe('resolved');
    expect(second.state).toBe('pending');
    expect(sc.tryConsume()).toBe(false);
    sc.grant(1);
    await flush();
    expect(second.state).toBe('resolved');
    expect(sc.stats()).toMatchObject({ maxQueueDepth: 2, waiting: 0 });
  });

  it('rejects an acquire at its deadline with a retryable ERR_FLOWCTL_DEADLINE', async () => {
    const clock = new ManualClock(1000);
    const sc = new SendCredits({ initialCredits: 2, clock });
    sc.tryConsume();
    const t = track(sc.acquire({ timeoutMs: 50 }));
    clock.advance(49);
    await flush();
    expect(t.state).toBe('pending');
    clock.advance(1);
    await flush();
    expect(t.state).toBe('rejected');
    expect(t.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
    expect(t.error?.retryable).toBe(true);
    expect(sc.stats()).toMatchObject({ deadlineRejections: 1, timeBlockedMs: 50, waiting: 0 });
    expect(clock.pendingTimers).toBe(0);
  });

  it('uses the earlier of deadline and timeoutMs, and the default when neither is given', async () => {
    const clock = new ManualClock();
    const sc = new SendCredits({ initialCredits: 2, clock, defaultTimeoutMs: 500 });
    sc.tryConsume();
    const a = track(sc.acquire({ deadline: 20, timeoutMs: 1000 }));
    const b = track(sc.acquire());
    clock.advance(20);
    await flush();
    expect(a.state).toBe('rejected');
    expect(b.state).toBe('pending');
    clock.advance(480);
    await flush();
    expect(b.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
    // a deadline already passed rejects at once
    const c = track(sc.acquire({ deadline: 0 }));
    await flush();
    expect(c.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
  });

  it('rejects with ERR_FLOWCTL_ABORTED when the signal aborts, before or during the wait', async () => {
    const clock = new ManualClock();
    const sc = new SendCredits({ initialCredits: 2, clock });
    sc.tryConsume();
    const ac = new AbortController();
    const t = track(sc.acquire({ signal: ac.signal }));
    const reason = new Error('user cancelled');
    ac.abort(reason);
    await flush();
    expect(t.error?.code).toBe('ERR_FLOWCTL_ABORTED');
    expect(t.error?.cause).toBe(reason);
    const pre = track(sc.acquire({ signal: AbortSignal.abort() }));
    await flush();
    expect(pre.error?.code).toBe('ERR_FLOWCTL_ABORTED');
    expect(clock.pendingTimers).toBe(0);
    // the credit freed later goes to nobody aborted: it stays available
    sc.grant(1);
    expect(sc.available).toBe(2);
  });

  it('bounds its wait queue with ERR_FLOWCTL_QUEUE_FULL', async () => {
    const sc = new SendCredits({ initialCredits: 2, clock: new ManualClock(), maxWaiters: 2 });
    sc.tryConsume();
    sc.acquire().catch(() => {});
    sc.acquire().catch(() => {});
    const third = track(sc.acquire());
    await flush();
    expect(third.error?.code).toBe('ERR_FLOWCTL_QUEUE_FULL');
    expect(third.error?.retryable).toBe(true);
    sc.close();
  });

  it('throws ERR_FLOWCTL_INVALID_ARG for bad options, synchronously', () => {
    expectCode(() => new SendCredits({ initialCredits: 1 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => new SendCredits({ initialCredits: Number.NaN }), 'ERR_FLOWCTL_INVALID_ARG');
    // the reserve cannot be switched off: that is the deadlock the ablation shows
    expectCode(
      () => new SendCredits({ initialCredits: 4, reservedCredits: 0 }),
      'ERR_FLOWCTL_INVALID_ARG',
    );
    const sc = new SendCredits({ initialCredits: 4 });
    expectCode(() => sc.acquire({ timeoutMs: -1 }), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(
      () => sc.acquire({ timeoutMs: Number.POSITIVE_INFINITY }),
      'ERR_FLOWCTL_INVALID_ARG',
    );
    expectCode(
      () => sc.acquire({ signal: {} as unknown as AbortSignal }),
      'ERR_FLOWCTL_INVALID_ARG',
    );
  });

  it('never lets a data message go without a credit, and every wait ends by its deadline', async () => {
    const op = fc.oneof(
      fc.constant({ t: 'try' as const }),
      fc.record({ t: fc.constant('acquire' as const), timeout: fc.integer({ min: 0, max: 50 }) }),
      fc.record({ t: fc.constant('grant' as const), n: fc.integer({ min: 0, max: 4 }) }),
      fc.record({ t: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 30 }) }),
      fc.record({ t: fc.constant('abort' as const), i: fc.nat() }),
      fc.constant({ t: 'reserved' as const }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 8 }),
        fc.array(op, { maxLength: 80 }),
        async (credits, ops) => {
          const clock = new ManualClock();
          const sc = new SendCredits({ initialCredits: credits, clock });
          let sent = 0; // data messages that went out holding a credit
          let spent = 0; // every credit taken (data + reserved)
          let granted = 0;
          const waits: { t: Tracked; deadline: number; ac: AbortController; counted: boolean }[] =
            [];
          const observe = (): void => {
            for (const w of waits) {
              if (w.t.state === 'resolved' && !w.counted) {
                w.counted = true;
                sent++;
                spent++;
              }
              if (w.t.error?.code === 'ERR_FLOWCTL_DEADLINE') {
                // never rejected before its deadline
                expect(clock.now()).toBeGreaterThanOrEqual(w.deadline);
              }
            }
            expect(sc.available).toBeGreaterThanOrEqual(0);
            expect(sc.available).toBe(credits - spent + granted);
            // data never spent the reserve
            expect(sent).toBeLessThanOrEqual(credits - 1 + granted);
          };
          for (const o of ops) {
            if (o.t === 'try') {
              if (sc.tryConsume()) {
                sent++;
                spent++;
              }
            } else if (o.t === 'reserved') {
              if (sc.tryConsumeReserved()) spent++;
            } else if (o.t === 'acquire') {
              const ac = new AbortController();
              const p = sc.acquire({ timeoutMs: o.timeout, signal: ac.signal });
              waits.push({ t: track(p), deadline: clock.now() + o.timeout, ac, counted: false });
            } else if (o.t === 'grant') {
              const n = Math.min(o.n, sc.outstanding);
              sc.grant(n);
              granted += n;
            } else if (o.t === 'advance') {
              clock.advance(o.ms);
            } else if (waits.length > 0) {
              waits[o.i % waits.length]?.ac.abort();
            }
            await flush();
            observe();
          }
          clock.advance(1000);
          await flush();
          observe();
          for (const w of waits) {
            expect(w.t.state).not.toBe('pending');
            if (w.t.state === 'rejected') {
              expect(w.t.error).toBeInstanceOf(FlowctlError);
              expect(['ERR_FLOWCTL_DEADLINE', 'ERR_FLOWCTL_ABORTED']).toContain(w.t.error?.code);
            }
          }
          expect(clock.pendingTimers).toBe(0);
        },
      ),
      { numRuns: 150 },
    );
  });
});

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BackoffPolicy, ExponentialBackoff, RpcError } from '../src/index.js';

/** Runs a policy as the reconnect loop will: each failed attempt waits the delay it returns. */
function schedule(policy: BackoffPolicy, attemptMs = 0): number[] {
  const delays: number[] = [];
  let elapsed = 0;
  for (let attempt = 1; attempt < 10_000; attempt++) {
    const d = policy.nextDelay(attempt, elapsed);
    if (d === null) return delays;
    delays.push(d);
    elapsed += d + attemptMs;
  }
  throw new Error('the policy never gave up');
}

describe('ExponentialBackoff', () => {
  it('without jitter doubles from base to cap, then gives up after maxAttempts', () => {
    const p = new ExponentialBackoff({ baseMs: 10, capMs: 50, maxAttempts: 6, jitter: 'none' });
    expect(schedule(p)).toEqual([10, 20, 40, 50, 50, 50]);
  });

  it('never waits past the deadline, and gives up once it has passed', () => {
    const p = new ExponentialBackoff({ baseMs: 100, capMs: 100, deadlineMs: 250, jitter: 'none' });
    expect(schedule(p)).toEqual([100, 100, 50]);
    expect(p.nextDelay(1, 250)).toBeNull();
  });

  it('every jittered delay lies inside its envelope and the deadline (any random sequence)', () => {
    fc.assert(
      fc.property(
        fc.record({
          baseMs: fc.integer({ min: 0, max: 1000 }),
          extra: fc.integer({ min: 0, max: 10_000 }),
          factor: fc.double({ min: 1, max: 4, noNaN: true }),
          maxAttempts: fc.integer({ min: 0, max: 60 }),
          deadlineMs: fc.integer({ min: 0, max: 100_000 }),
          jitter: fc.constantFrom('full' as const, 'equal' as const, 'none' as const),
        }),
        fc.array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), { minLength: 1 }),
        fc.integer({ min: 0, max: 500 }),
        (o, randoms, attemptMs) => {
          let i = 0;
          const random = () => randoms[i++ % randoms.length] as number;
          const capMs = o.baseMs + o.extra;
          const { extra: _extra, ...options } = o;
          const p = new ExponentialBackoff({ ...options, capMs, random });
          const delays = schedule(p, attemptMs);
          expect(delays.length).toBeLessThanOrEqual(o.maxAttempts);
          let elapsed = 0;
          delays.forEach((d, n) => {
            const envelope = Math.min(capMs, o.baseMs * o.factor ** n);
            expect(d).toBeGreaterThanOrEqual(0);
            expect(d).toBeLessThanOrEqual(envelope);
            expect(elapsed + d).toBeLessThanOrEqual(o.deadlineMs);
            if (o.jitter === 'equal')
              expect(d).toBeGreaterThanOrEqual(Math.min(envelope / 2, o.deadlineMs - elapsed));
            elapsed += d + attemptMs;
          });
        },
      ),
    );
  });

  it('full jitter uses the injected random source', () => {
    const p = new ExponentialBackoff({ baseMs: 100, random: () => 0.25 });
    expect(p.nextDelay(1, 0)).toBe(25);
    expect(p.nextDelay(3, 0)).toBe(100);
  });

  it('huge attempt numbers stay at the cap', () => {
    const p = new ExponentialBackoff({ baseMs: 1, capMs: 7, jitter: 'none', maxAttempts: 1e9 });
    expect(p.nextDelay(1e8, 0)).toBe(7);
  });

  it('bad options, arguments and random sources are typed mistakes', () => {
    const bad = [
      () => new ExponentialBackoff({ baseMs: -1 }),
      () => new ExponentialBackoff({ baseMs: 10, capMs: 5 }),
      () => new ExponentialBackoff({ factor: 0.5 }),
      () => new ExponentialBackoff({ jitter: 'some' as never }),
      () =>
        new ExponentialBackoff({
          maxAttempts: Number.POSITIVE_INFINITY,
          deadlineMs: Number.POSITIVE_INFINITY,
        }),
      () => new ExponentialBackoff({ random: 3 as never }),
      () => new ExponentialBackoff({ retries: 3 } as never),
      () => new ExponentialBackoff().nextDelay(0, 0),
      () => new ExponentialBackoff().nextDelay(1, Number.NaN),
      () => new ExponentialBackoff({ random: () => 1 }).nextDelay(1, 0),
    ];
    for (const f of bad) {
      expect(f).toThrow(RpcError);
      expect(f).toThrow(expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }));
    }
  });
});

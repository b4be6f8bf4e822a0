import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type BackoffPolicy,
  ExponentialBackoff,
  isRefusedConnect,
  RpcError,
} from '../src/index.js';

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

  it('after a refused connection the envelope stops at refusedCapMs (a restarted server is found soon)', () => {
    const refused = Object.assign(new Error('connect to 127.0.0.1:1'), {
      code: 'ERR_MUX_CONNECTION_LOST',
      cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), {
        code: 'ECONNREFUSED',
      }),
    });
    const other = Object.assign(new Error('handshake'), { code: 'ERR_MUX_TIMEOUT' });
    const p = new ExponentialBackoff({ baseMs: 10, capMs: 2000, jitter: 'none' });
    expect(p.refusedCapMs).toBe(50);
    expect(p.nextDelay(8, 0, refused)).toBe(50);
    expect(p.nextDelay(2, 0, refused)).toBe(20);
    expect(p.nextDelay(8, 0, other)).toBe(1280);
    expect(p.nextDelay(8, 0)).toBe(1280);
    // Never above capMs, and the deadline still bounds it.
    expect(new ExponentialBackoff({ baseMs: 5, capMs: 30 }).refusedCapMs).toBe(30);
    const d = new ExponentialBackoff({ refusedCapMs: 500, deadlineMs: 100, jitter: 'none' });
    expect(d.nextDelay(9, 80, refused)).toBe(20);
    expect(d.nextDelay(9, 100, refused)).toBeNull();
  });

  it('isRefusedConnect finds ECONNREFUSED along the cause chain only', () => {
    const net = Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
    expect(isRefusedConnect(net)).toBe(true);
    expect(isRefusedConnect(new Error('wrapped', { cause: new Error('x', { cause: net }) }))).toBe(
      true,
    );
    expect(isRefusedConnect(Object.assign(new Error('reset'), { code: 'ECONNRESET' }))).toBe(false);
    expect(isRefusedConnect(undefined)).toBe(false);
    expect(isRefusedConnect('ECONNREFUSED')).toBe(false);
    const loop: { code: string; cause?: unknown } = { code: 'X' };
    loop.cause = loop;
    expect(isRefusedConnect(loop)).toBe(false);
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
      () => new ExponentialBackoff({ refusedCapMs: -1 }),
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

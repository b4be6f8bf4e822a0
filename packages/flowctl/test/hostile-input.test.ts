// Issue 17 for flowctl: what a user types by mistake gets ERR_FLOWCTL_INVALID_ARG (never a raw
// TypeError), messages show the type and value (finding 6), options are plain objects read by
// own properties, and no wait ends before its deadline however far away it is.
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type Clock,
  defaultFlowParams,
  FlowctlError,
  ManualClock,
  parseFlowParams,
  ReceiveCredits,
  SendCredits,
  SendWindow,
  SharedBudget,
  systemClock,
} from '../src/index.js';
import { expectCode, flush, track } from './helpers.js';

function message(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(FlowctlError);
    return (err as FlowctlError).message;
  }
  throw new Error('did not throw');
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('flowctl messages show the type and the value (finding 6)', () => {
  it('sizes, counts and options', () => {
    const w = new SendWindow({ maxBytes: 100, maxMessages: 2 });
    expect(message(() => w.tryAcquire('64' as never))).toContain("got string '64'");
    expect(message(() => w.release(1.5))).toContain('got number 1.5');
    expect(message(() => new SendCredits({ initialCredits: '8' as never }))).toContain(
      "got string '8'",
    );
    expect(
      message(() => new ReceiveCredits({ initialCredits: 8, returnThreshold: [2] as never })),
    ).toContain('got array');
    expect(message(() => w.acquire(1, { timeoutMs: '5' as never }))).toContain("got string '5'");
    expect(message(() => w.acquire(1, { channel: -1 }))).toContain('got number -1');
    expect(
      message(() => parseFlowParams({ ...defaultFlowParams(), windowBytes: 2n as never })),
    ).toContain('got bigint 2n');
  });
});

describe('flowctl options objects', () => {
  it('null, strings, arrays where options belong are ERR_FLOWCTL_INVALID_ARG, also for acquire', () => {
    const w = new SendWindow({ maxBytes: 100, maxMessages: 2 });
    const c = new SendCredits({ initialCredits: 4 });
    for (const bad of [null, 'soft', 42, [], new Map(), new String('x')]) {
      expectCode(() => new SendWindow(bad as never), 'ERR_FLOWCTL_INVALID_ARG');
      expectCode(() => new SendCredits(bad as never), 'ERR_FLOWCTL_INVALID_ARG');
      expectCode(() => new ReceiveCredits(bad as never), 'ERR_FLOWCTL_INVALID_ARG');
      expectCode(() => new SharedBudget(bad as never), 'ERR_FLOWCTL_INVALID_ARG');
      expectCode(() => parseFlowParams(bad), 'ERR_FLOWCTL_INVALID_ARG');
      expectCode(() => defaultFlowParams(bad as never), 'ERR_FLOWCTL_INVALID_ARG');
      // acquire(bytes, null) used to throw "Cannot read properties of null".
      expectCode(() => w.acquire(1, bad as never), 'ERR_FLOWCTL_INVALID_ARG');
      expectCode(() => c.acquire(bad as never), 'ERR_FLOWCTL_INVALID_ARG');
    }
    expect(w.stats()).toMatchObject({ bytesInFlight: 0, messagesInFlight: 0, queued: 0 });
    expect(c.available).toBe(4);
  });

  it('a budget or clock that is not one is ERR_FLOWCTL_INVALID_ARG at construction', () => {
    for (const budget of [null, 'budget', {}, 1]) {
      expectCode(
        () => new SendWindow({ maxBytes: 1, maxMessages: 1, budget } as never),
        'ERR_FLOWCTL_INVALID_ARG',
      );
    }
    for (const clock of [null, 'clock', {}, { now: () => 0 }, Date]) {
      expectCode(
        () => new SendWindow({ maxBytes: 1, maxMessages: 1, clock } as never),
        'ERR_FLOWCTL_INVALID_ARG',
      );
      expectCode(
        () => new SendCredits({ initialCredits: 2, clock } as never),
        'ERR_FLOWCTL_INVALID_ARG',
      );
    }
  });

  it('destroy(err) takes an Error (or nothing): anything else is ERR_FLOWCTL_INVALID_ARG and changes nothing', () => {
    const w = new SendWindow({ maxBytes: 1, maxMessages: 1 });
    const c = new SendCredits({ initialCredits: 2 });
    expectCode(() => w.destroy('boom' as never), 'ERR_FLOWCTL_INVALID_ARG');
    expectCode(() => c.destroy({ message: 'x' } as never), 'ERR_FLOWCTL_INVALID_ARG');
    expect(w.state).toBe('open');
    expect(c.state).toBe('open');
  });

  it('inherited properties are not read: not from a prototype object, not from a polluted Object.prototype', () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.maxQueued = 0;
    proto.timeoutMs = 0;
    proto.channel = 'x';
    try {
      const clock = new ManualClock();
      const w = new SendWindow({ maxBytes: 10, maxMessages: 1, clock });
      expect(w.tryAcquire(10)).toBe(true);
      const t = track(w.acquire(5)); // maxQueued and timeoutMs from the prototype would reject it
      expect(w.queued).toBe(1);
      w.release(10);
      return flush().then(() => {
        expect(t.state).toBe('resolved');
        const inherited = Object.create({ maxBytes: 1, maxMessages: 1 });
        expectCode(() => new SendWindow(inherited), 'ERR_FLOWCTL_INVALID_ARG');
        const params = Object.create(defaultFlowParams());
        expectCode(() => parseFlowParams(params), 'ERR_FLOWCTL_INVALID_ARG');
      });
    } finally {
      delete proto.maxQueued;
      delete proto.timeoutMs;
      delete proto.channel;
    }
  });
});

describe('waits far in the future', () => {
  it('systemClock never asks setTimeout for more than 2^31 - 1 ms (it would fire after 1 ms)', () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const handle = systemClock.setTimer(() => {}, 2 ** 40);
    systemClock.clearTimer(handle);
    expect(spy.mock.calls[0]?.[1]).toBe(2 ** 31 - 1);
  });

  it('a clock that fires early does not end a wait before its deadline: the timer is set again', async () => {
    // A clock whose timers fire at most 1000 ms later, however long the delay (as setTimeout
    // is capped at 2^31 - 1 ms).
    const inner = new ManualClock();
    const capped: Clock = {
      now: () => inner.now(),
      setTimer: (cb, ms) => inner.setTimer(cb, Math.min(ms, 1000)),
      clearTimer: (h) => inner.clearTimer(h),
    };
    const c = new SendCredits({ initialCredits: 2, clock: capped });
    expect(c.tryConsume()).toBe(true);
    const w = new SendWindow({ maxBytes: 1, maxMessages: 1, clock: capped });
    expect(w.tryAcquire(1)).toBe(true);
    const credit = track(c.acquire({ timeoutMs: 5000 }));
    const space = track(w.acquire(1, { timeoutMs: 5000 }));
    inner.advance(4999);
    await flush();
    expect(credit.state).toBe('pending');
    expect(space.state).toBe('pending');
    inner.advance(1);
    await flush();
    expect(credit.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
    expect(space.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
  });
});

describe('found by the model-based fuzz', () => {
  it('release() of the last message must give back every byte still counted (else the window shrinks for good)', async () => {
    const budget = new SharedBudget({ maxBytes: 100, maxMessages: 4 });
    const w = new SendWindow({ maxBytes: 100, maxMessages: 1, budget, clock: new ManualClock() });
    expect(w.tryAcquire(60)).toBe(true);
    expectCode(() => w.release(0), 'ERR_FLOWCTL_INVALID_ARG');
    expect(w.stats()).toMatchObject({ bytesInFlight: 60, messagesInFlight: 1 });
    w.release(60);
    expect(w.tryAcquire(100)).toBe(true);
  });

  it('destroy() gives the bytes of its messages back to the shared budget', () => {
    const budget = new SharedBudget({ maxBytes: 100, maxMessages: 4 });
    const w = new SendWindow({ maxBytes: 100, maxMessages: 2, budget });
    expect(w.tryAcquire(30)).toBe(true);
    expect(w.tryAcquire(20)).toBe(true);
    w.release(10); // one message back, with fewer bytes than it took: 40 bytes, 1 message left
    w.destroy();
    expect(budget.stats()).toMatchObject({ bytesInFlight: 0, messagesInFlight: 0 });
  });
});

describe('exports (issue 8)', () => {
  it('waits take AcquireOptions; nothing is published from internal/', async () => {
    const flowctl = await import('../src/index.js');
    expect(Object.keys(flowctl)).not.toContain('WaitOptions');
    const o: import('../src/index.js').AcquireOptions = { timeoutMs: 1 };
    const c = new SendCredits({ initialCredits: 2, clock: new ManualClock() });
    await c.acquire(o);
    expect(c.available).toBe(1);
  });
});

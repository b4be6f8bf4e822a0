import { describe, expect, it } from 'vitest';
import {
  FlowctlClosedError,
  FlowctlError,
  ManualClock,
  SendCredits,
  SendWindow,
  SharedBudget,
  systemClock,
} from '../src/index.js';
import { expectCode, flush, track } from './helpers.js';

/** One waiter-holding object, blocked, with a way to start a wait and to unblock it. */
interface Subject {
  readonly name: string;
  make(clock: ManualClock): {
    wait(signal?: AbortSignal): Promise<void>;
    close(): void;
    destroy(err?: Error): void;
    dispose(): Promise<void>;
    callAfterClose(): unknown;
    state(): string;
    waiting(): number;
  };
}

const subjects: Subject[] = [
  {
    name: 'SendCredits',
    make(clock) {
      const sc = new SendCredits({ initialCredits: 2, clock });
      sc.tryConsume();
      return {
        wait: (signal) =>
          sc.acquire(signal === undefined ? { timeoutMs: 100 } : { timeoutMs: 100, signal }),
        close: () => sc.close(),
        destroy: (err) => sc.destroy(err),
        dispose: () => sc[Symbol.asyncDispose](),
        callAfterClose: () => sc.tryConsume(),
        state: () => sc.state,
        waiting: () => sc.stats().waiting,
      };
    },
  },
  {
    name: 'SendWindow',
    make(clock) {
      const w = new SendWindow({ maxBytes: 10, maxMessages: 4, clock });
      w.tryAcquire(10);
      return {
        wait: (signal) =>
          w.acquire(5, signal === undefined ? { timeoutMs: 100 } : { timeoutMs: 100, signal }),
        close: () => w.close(),
        destroy: (err) => w.destroy(err),
        dispose: () => w[Symbol.asyncDispose](),
        callAfterClose: () => w.tryAcquire(1),
        state: () => w.state,
        waiting: () => w.queued,
      };
    },
  },
  {
    name: 'SendWindow on a SharedBudget',
    make(clock) {
      const budget = new SharedBudget({ maxBytes: 10, maxMessages: 4 });
      const other = new SendWindow({ maxBytes: 10, maxMessages: 4, clock, budget });
      other.tryAcquire(10); // the budget is what blocks
      const w = new SendWindow({ maxBytes: 10, maxMessages: 4, clock, budget });
      return {
        wait: (signal) =>
          w.acquire(5, signal === undefined ? { timeoutMs: 100 } : { timeoutMs: 100, signal }),
        close: () => w.close(),
        destroy: (err) => w.destroy(err),
        dispose: () => w[Symbol.asyncDispose](),
        callAfterClose: () => w.acquire(1),
        state: () => w.state,
        waiting: () => w.queued + budget.stats().waitingWindows,
      };
    },
  },
];

describe.each(subjects)('$name lifecycle', (subject) => {
  it('close during a wait rejects it with ERR_FLOWCTL_CLOSED; close is idempotent', async () => {
    const clock = new ManualClock();
    const s = subject.make(clock);
    const t = track(s.wait());
    s.close();
    s.close();
    await flush();
    expect(t.error).toBeInstanceOf(FlowctlClosedError);
    expect(t.error?.code).toBe('ERR_FLOWCTL_CLOSED');
    expect(s.state()).toBe('closed');
    expect(s.waiting()).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('destroy(err) during a wait rejects it with that error', async () => {
    const clock = new ManualClock();
    const s = subject.make(clock);
    const t = track(s.wait());
    const err = new FlowctlError('ERR_FLOWCTL_CLOSED', 'connection failed', { retryable: true });
    s.destroy(err);
    s.destroy(new Error('second'));
    await flush();
    expect(t.error).toBe(err);
    expect(s.state()).toBe('destroyed');
    expect(clock.pendingTimers).toBe(0);
  });

  it('abort during a wait rejects it with ERR_FLOWCTL_ABORTED and clears its timer', async () => {
    const clock = new ManualClock();
    const s = subject.make(clock);
    const ac = new AbortController();
    const t = track(s.wait(ac.signal));
    ac.abort();
    await flush();
    expect(t.error?.code).toBe('ERR_FLOWCTL_ABORTED');
    expect(s.waiting()).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });

  it('a wait past its deadline rejects with ERR_FLOWCTL_DEADLINE', async () => {
    const clock = new ManualClock();
    const s = subject.make(clock);
    const t = track(s.wait());
    clock.advance(100);
    await flush();
    expect(t.error?.code).toBe('ERR_FLOWCTL_DEADLINE');
    expect(s.waiting()).toBe(0);
  });

  it('calls after close throw ERR_FLOWCTL_CLOSED instead of crashing', () => {
    const s = subject.make(new ManualClock());
    s.close();
    expectCode(() => s.callAfterClose(), 'ERR_FLOWCTL_CLOSED');
    expectCode(() => s.wait(), 'ERR_FLOWCTL_CLOSED');
  });

  it('await using closes it (Symbol.asyncDispose)', async () => {
    const s = subject.make(new ManualClock());
    const t = track(s.wait());
    await s.dispose();
    await flush();
    expect(t.error?.code).toBe('ERR_FLOWCTL_CLOSED');
    expect(s.state()).toBe('closed');
  });
});

describe('lifecycle details', () => {
  it('a closed window still accepts releases of sends already in flight', () => {
    const budget = new SharedBudget({ maxBytes: 10, maxMessages: 4 });
    const w = new SendWindow({ maxBytes: 10, maxMessages: 4, budget });
    w.tryAcquire(6);
    w.close();
    w.release(6);
    expect(w.bytesInFlight).toBe(0);
    expect(budget.bytesInFlight).toBe(0);
  });

  it('the default clock enforces deadlines with real timers (no clock injected)', async () => {
    const sc = new SendCredits({ initialCredits: 2 });
    sc.tryConsume();
    await expect(sc.acquire({ timeoutMs: 1 })).rejects.toMatchObject({
      code: 'ERR_FLOWCTL_DEADLINE',
    });
    const w = new SendWindow({ maxBytes: 1, maxMessages: 1 });
    w.tryAcquire(1);
    await expect(w.acquire(1, { timeoutMs: 1 })).rejects.toMatchObject({
      code: 'ERR_FLOWCTL_DEADLINE',
    });
    expect(typeof systemClock.now()).toBe('number');
  });

  it('ManualClock fires timers in time order, then creation order, and never goes back', () => {
    const clock = new ManualClock(10);
    const fired: string[] = [];
    clock.setTimer(() => fired.push('b'), 5);
    clock.setTimer(() => fired.push('a'), 1);
    const c = clock.setTimer(() => fired.push('c'), 5);
    clock.setTimer(() => fired.push('d'), 5);
    clock.clearTimer(c);
    expect(clock.pendingTimers).toBe(3);
    clock.advance(5);
    expect(fired).toEqual(['a', 'b', 'd']);
    expect(clock.now()).toBe(15);
    clock.advanceTo(3);
    expect(clock.now()).toBe(15);
    expect(clock.runNext()).toBe(false);
    expectCode(() => clock.advance(-1), 'ERR_FLOWCTL_INVALID_ARG');
  });
});

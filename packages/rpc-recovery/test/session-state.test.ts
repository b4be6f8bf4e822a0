import diagnostics_channel from 'node:diagnostics_channel';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DIAGNOSTICS_CHANNELS,
  EpochFilter,
  RpcError,
  SESSION_TRANSITIONS,
  type SessionState,
  type SessionStateChange,
  SessionStateMachine,
  type StaleEpochDrop,
} from '../src/index.js';

const STATES: SessionState[] = ['connecting', 'connected', 'recovering', 'failed', 'closed'];
const fault = () => new Error('qp broken');

/** Drives a machine to `state` by legal steps. */
function reach(state: SessionState): SessionStateMachine {
  const m = new SessionStateMachine({ sessionId: 'sess' });
  if (state === 'connecting') return m;
  if (state === 'failed') {
    m.fail(fault());
    return m;
  }
  if (state === 'closed') {
    m.close();
    return m;
  }
  m.connected(1);
  if (state === 'recovering') m.lost(fault());
  return m;
}

type Action = 'connected' | 'lost' | 'fail' | 'close';
const TARGET: Record<Action, SessionState> = {
  connected: 'connected',
  lost: 'recovering',
  fail: 'failed',
  close: 'closed',
};

function act(m: SessionStateMachine, a: Action): SessionStateChange | undefined {
  switch (a) {
    case 'connected':
      return m.connected(m.epoch + 1);
    case 'lost':
      return m.lost(fault());
    case 'fail':
      return m.fail(fault());
    case 'close':
      return m.close();
  }
}

const subscriptions: [string, (m: unknown) => void][] = [];
function subscribe(name: string, fn: (m: unknown) => void) {
  diagnostics_channel.subscribe(name, fn);
  subscriptions.push([name, fn]);
}
afterEach(() => {
  for (const [n, f] of subscriptions.splice(0)) diagnostics_channel.unsubscribe(n, f);
});

describe('SessionStateMachine', () => {
  // Every (state × action) pair: the legal ones move, the others throw and change nothing.
  for (const state of STATES) {
    for (const a of ['connected', 'lost', 'fail', 'close'] as Action[]) {
      const to = TARGET[a];
      const legal = SESSION_TRANSITIONS[state].includes(to);
      const terminalClose = a === 'close' && (state === 'closed' || state === 'failed');
      const name = `${state}_${a}_${legal ? `moves_to_${to}` : terminalClose ? 'is_a_no_op' : 'is_refused'}`;
      it(name, () => {
        const m = reach(state);
        const events: SessionStateChange[] = [];
        m.on('state', (c) => events.push(c));
        const epoch = m.epoch;
        if (legal) {
          const change = act(m, a);
          expect(m.state).toBe(to);
          expect(change).toMatchObject({ from: state, to, sessionId: 'sess' });
          expect(events).toEqual([change]);
          if (a === 'connected') expect(m.epoch).toBe(epoch + 1);
        } else if (terminalClose) {
          expect(act(m, a)).toBeUndefined();
          expect(m.state).toBe(state);
          expect(events).toEqual([]);
        } else {
          expect(() => act(m, a)).toThrow(
            expect.objectContaining({ code: 'ERR_RPC_INVALID_STATE' }),
          );
          expect(m.state).toBe(state);
          expect(m.epoch).toBe(epoch);
          expect(events).toEqual([]);
        }
      });
    }
  }

  it('random action sequences follow only legal paths, seen the same by events and diagnostics', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom<Action>('connected', 'lost', 'fail', 'close'), { maxLength: 30 }),
        (actions) => {
          const m = new SessionStateMachine({ sessionId: 'p' });
          const events: SessionStateChange[] = [];
          const published: unknown[] = [];
          const perTarget: string[] = [];
          const sub = (msg: unknown) => published.push(msg);
          diagnostics_channel.subscribe(DIAGNOSTICS_CHANNELS.sessionState, sub);
          m.on('state', (c) => events.push(c));
          for (const s of ['connected', 'recovering', 'failed', 'closed'] as const) {
            m.on(s, (c) => perTarget.push(c.to));
          }
          try {
            for (const a of actions) {
              const before = m.state;
              try {
                act(m, a);
              } catch (err) {
                expect(err).toBeInstanceOf(RpcError);
                expect(m.state).toBe(before);
              }
            }
          } finally {
            diagnostics_channel.unsubscribe(DIAGNOSTICS_CHANNELS.sessionState, sub);
          }
          let state: SessionState = 'connecting';
          let epoch = 0;
          for (const e of events) {
            expect(e.from).toBe(state);
            expect(SESSION_TRANSITIONS[state]).toContain(e.to);
            expect(e.epoch).toBeGreaterThanOrEqual(epoch);
            if (e.to === 'connected') expect(e.epoch).toBeGreaterThan(epoch);
            state = e.to;
            epoch = e.epoch;
          }
          expect(m.state).toBe(state);
          expect(published).toEqual(events);
          expect(perTarget).toEqual(events.map((e) => e.to));
        },
      ),
    );
  });

  it('stale_epoch_completion_is_dropped_and_counted', () => {
    const m = new SessionStateMachine({ sessionId: 'sess' });
    const drops: StaleEpochDrop[] = [];
    subscribe(DIAGNOSTICS_CHANNELS.staleEpoch, (d) => drops.push(d as StaleEpochDrop));
    m.connected(1);
    expect(m.epochs.accept(1)).toBe(true);
    m.lost(fault());
    expect(m.epochs.accept(1)).toBe(false); // the dying connection's late completion
    m.connected(2);
    expect(m.epochs.accept(1)).toBe(false);
    expect(m.epochs.accept(2)).toBe(true);
    expect(m.epochs.accept(7)).toBe(false);
    expect(m.epochs.stats()).toEqual({ accepted: 2, stale: 2, future: 1 });
    expect(drops).toEqual([
      { sessionId: 'sess', epoch: 1, current: 1, kind: 'stale' },
      { sessionId: 'sess', epoch: 1, current: 2, kind: 'stale' },
      { sessionId: 'sess', epoch: 7, current: 2, kind: 'future' },
    ]);
  });

  it('a reconnection must move to a newer epoch, and nothing changes when it does not', () => {
    const m = new SessionStateMachine();
    m.connected(3, 'abc');
    expect(m.sessionId).toBe('abc');
    m.lost(fault());
    expect(() => m.connected(3)).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_STATE' }),
    );
    expect(() => m.connected(4, 'other')).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_STATE' }),
    );
    expect(() => m.connected(0)).toThrow(expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }));
    expect(m.state).toBe('recovering');
    expect(m.connected(4).epoch).toBe(4);
  });

  it('a_fault_must_be_an_error', () => {
    const m = reach('connected');
    expect(() => m.lost('gone' as never)).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
    );
    expect(m.state).toBe('connected');
  });

  it('epoch filter rejects values that are no epoch', () => {
    const f = new EpochFilter();
    expect(f.accept(0)).toBe(false);
    f.advance(1);
    for (const bad of [Number.NaN, -1, 1.5, Number.POSITIVE_INFINITY])
      expect(f.accept(bad)).toBe(false);
    expect(f.stats().accepted).toBe(0);
  });
});

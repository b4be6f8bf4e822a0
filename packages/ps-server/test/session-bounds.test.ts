// Security review L2: writer sessions are remembered for de-duplication, but not without
// bound — writer ids that come and go (a random id per client start) would grow the table
// and every snapshot forever. Past maxSessions the longest idle one is forgotten, if it has
// been idle for sessionIdleMs; otherwise the new session is refused, nothing applied.
import { expect, it } from 'vitest';
import { ParameterStore } from '../src/index.js';
import { keys, tmpDir } from './helpers.js';

const TABLES = [{ name: 'emb', dim: 1, optimizer: { kind: 'sum' as const } }];

function store(clock: { t: number }, o: { maxSessions?: number; sessionIdleMs?: number } = {}) {
  return new ParameterStore({ tables: TABLES, now: () => clock.t, ...o });
}

const row = (s: ParameterStore, k: number): number => {
  const out = new Float32Array(1);
  s.pullInto('emb', keys(k), out);
  return out[0] as number;
};

const push = (s: ParameterStore, session: string, seq: number, k = 1) =>
  s.push('emb', keys(k), Float32Array.of(1), { session, seq });

it('a_new_session_past_maxSessions_is_refused_while_none_is_idle_long_enough_nothing_applied', async () => {
  const clock = { t: 0 };
  const s = store(clock, { maxSessions: 2, sessionIdleMs: 1_000 });
  await push(s, 'a', 1);
  await push(s, 'b', 1);
  clock.t = 999;
  expect(() => push(s, 'c', 1, 9)).toThrow(
    expect.objectContaining({ code: 'ERR_PS_TOO_MANY_SESSIONS', retryable: false }),
  );
  expect(row(s, 9)).toBe(0);
  expect(s.sessionSeq('c')).toBeUndefined();
  // Known sessions go on meanwhile.
  expect((await push(s, 'a', 2)).applied).toBe(true);
});

it('the_longest_idle_session_makes_room_once_idle_for_sessionIdleMs', async () => {
  const clock = { t: 0 };
  const s = store(clock, { maxSessions: 2, sessionIdleMs: 1_000 });
  await push(s, 'a', 1);
  clock.t = 100;
  await push(s, 'b', 1);
  clock.t = 500;
  await push(s, 'a', 2); // a is now the most recent: b is the longest idle
  clock.t = 1_100; // b idle 1 000 ms, a only 600
  expect((await push(s, 'c', 1)).applied).toBe(true);
  expect(s.sessionSeq('b')).toBeUndefined();
  expect(s.sessionSeq('a')).toBe(2);
  expect(s.sessionSeq('c')).toBe(1);
  // What forgetting means: b's old seq is no longer recognised as a duplicate (hence the
  // idle bound must exceed every writer's retry window).
  clock.t = 1_600; // a idle 1 100 ms now
  expect((await push(s, 'b', 1)).duplicate).toBe(false);
  expect(s.sessionSeq('a')).toBeUndefined();
});

it('duplicates_of_remembered_sessions_are_still_recognised_at_the_bound', async () => {
  const clock = { t: 0 };
  const s = store(clock, { maxSessions: 1, sessionIdleMs: 10 });
  await push(s, 'a', 5);
  clock.t = 1_000;
  // a is idle, but a retransmission of its own is no new session: recognised, not evicting.
  expect((await push(s, 'a', 5)).duplicate).toBe(true);
  expect(s.sessionSeq('a')).toBe(5);
});

it('bad_bounds_are_typed_mistakes', () => {
  const clock = { t: 0 };
  expect(() => store(clock, { maxSessions: 0 })).toThrow(
    expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }),
  );
  expect(() => store(clock, { sessionIdleMs: -1 })).toThrow(
    expect.objectContaining({ code: 'ERR_PS_INVALID_ARG' }),
  );
});

it('sessions_restored_from_the_log_keep_their_push_times_and_the_bound', async () => {
  const dir = tmpDir('ps-session-bounds-');
  const clock = { t: 0 };
  const opts = { dir, tables: TABLES, now: () => clock.t, maxSessions: 2, sessionIdleMs: 1_000 };
  const a = await ParameterStore.open(opts);
  await push(a, 'x', 3);
  clock.t = 800;
  await push(a, 'y', 4);
  await a.close();
  clock.t = 1_500; // x (pushed at 0 by the log) is idle; y (800) is not
  const b = await ParameterStore.open(opts);
  expect(b.sessionSeq('x')).toBe(3);
  expect(b.sessionSeq('y')).toBe(4);
  expect((await push(b, 'y', 4)).duplicate).toBe(true);
  expect((await push(b, 'z', 1)).applied).toBe(true);
  expect(b.sessionSeq('x')).toBeUndefined();
  expect(b.sessionSeq('y')).toBe(4);
  await b.close();
});

import { describe, expect, it } from 'vitest';
import { DeduplicationTable, RpcDecodeError } from '../src/index.js';
import { codeOf } from './support/codeOf.js';

const bytes = (...b: number[]) => new Uint8Array(b);

describe('DeduplicationTable', () => {
  it('duplicate_while_running_shares_the_first_reply', async () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    expect(t.begin('a', 0).status).toBe('new');
    const dup = t.begin('a', 0);
    const dup2 = t.begin('a', 0);
    expect(dup.status).toBe('in-progress');
    if (dup.status !== 'in-progress' || dup2.status !== 'in-progress')
      throw new Error('unreachable');
    expect(dup2.reply).toBe(dup.reply); // one shared promise, not one per duplicate
    t.complete('a', 0, bytes(7));
    await expect(dup.reply).resolves.toEqual(bytes(7));
    expect(t.stats()).toMatchObject({ duplicates: 2, running: 0, entries: 1, bytes: 1 });
  });

  it('done_request_returns_the_stored_reply_not_a_second_execution', () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    t.begin('a', 3);
    const reply = bytes(1, 2, 3);
    t.complete('a', 3, reply);
    reply[0] = 9; // the caller reuses its buffer
    expect(t.begin('a', 3)).toEqual({ status: 'done', reply: bytes(1, 2, 3) });
  });

  it('acked_requests_retire_and_their_replays_are_expired', () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    for (let i = 0; i < 4; i++) {
      t.begin('a', i);
      t.complete('a', i, bytes(i));
    }
    expect(t.begin('a', 4, 3).status).toBe('new'); // piggybacked: replies below 3 received
    expect(t.stats().entries).toBe(2);
    expect(t.floorOf('a')).toBe(3);
    expect(codeOf(() => t.begin('a', 1))).toBe('ERR_RPC_DEDUP_EXPIRED');
    expect(t.begin('a', 3).status).toBe('done');
  });

  it('request_acked_while_running_completes_without_being_kept', () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    t.begin('a', 0);
    t.ack('a', 1);
    expect(t.stats().entries).toBe(1); // still running: kept until it completes
    t.complete('a', 0, bytes(1));
    expect(t.stats()).toMatchObject({ entries: 0, bytes: 0, running: 0 });
    expect(codeOf(() => t.begin('a', 0))).toBe('ERR_RPC_DEDUP_EXPIRED');
  });

  it('session_full_is_retryable_and_nothing_runs', () => {
    const t = new DeduplicationTable({ maxEntriesPerSession: 2 });
    t.openSession('a');
    t.begin('a', 0);
    t.begin('a', 1);
    let err: unknown;
    try {
      t.begin('a', 2);
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: 'ERR_RPC_DEDUP_SESSION_FULL', retryable: true });
    t.complete('a', 0, bytes());
    expect(t.begin('a', 2, 1).status).toBe('new'); // the ack makes room
  });

  it('oversized_reply_is_dropped_but_the_request_stays_executed', () => {
    const t = new DeduplicationTable({ maxReplyBytes: 2 });
    t.openSession('a');
    t.begin('a', 0);
    t.complete('a', 0, bytes(1, 2, 3));
    expect(codeOf(() => t.begin('a', 0))).toBe('ERR_RPC_DEDUP_REPLY_DROPPED');
    expect(t.stats().repliesDropped).toBe(1);
  });

  it('session_byte_bound_drops_the_oldest_replies_first', () => {
    const t = new DeduplicationTable({ maxBytesPerSession: 4 });
    t.openSession('a');
    for (let i = 0; i < 3; i++) {
      t.begin('a', i);
      t.complete('a', i, bytes(i, i));
    }
    expect(codeOf(() => t.begin('a', 0))).toBe('ERR_RPC_DEDUP_REPLY_DROPPED');
    expect(t.begin('a', 1)).toEqual({ status: 'done', reply: bytes(1, 1) });
    expect(t.begin('a', 2)).toEqual({ status: 'done', reply: bytes(2, 2) });
  });

  it('total_bounds_evict_the_least_recently_used_session_and_its_resume_fails', async () => {
    const evicted: string[] = [];
    const t = new DeduplicationTable({
      maxTotalEntries: 2,
      maxEntriesPerSession: 2,
      onEvict: (id, why) => evicted.push(`${id}:${why}`),
    });
    t.openSession('old');
    t.openSession('new');
    t.begin('old', 0);
    const dup = t.begin('old', 0);
    t.begin('new', 0);
    t.begin('new', 1); // needs room: 'old' is the least recently used
    expect(evicted).toEqual(['old:entries']);
    expect(codeOf(() => t.begin('old', 1))).toBe('ERR_RPC_SESSION_EVICTED');
    if (dup.status !== 'in-progress') throw new Error('unreachable');
    await expect(dup.reply).rejects.toMatchObject({ code: 'ERR_RPC_SESSION_EVICTED' });
    t.complete('old', 0, bytes()); // its handler finishing later is harmless
    expect(t.stats()).toMatchObject({ sessions: 1, entries: 2, running: 2, sessionsEvicted: 1 });
  });

  it('a_session_used_again_after_another_opened_is_no_longer_the_least_recently_used', () => {
    const evicted: string[] = [];
    const t = new DeduplicationTable({
      maxTotalEntries: 3,
      onEvict: (id, why) => evicted.push(`${id}:${why}`),
    });
    t.openSession('a');
    t.begin('a', 0); // 'a' the most recent
    t.openSession('b'); // now 'b'
    t.begin('b', 0);
    t.begin('a', 1); // 'a' again, after 'b'
    t.openSession('c');
    t.begin('c', 0); // needs room: 'b' is the least recently used
    expect(evicted).toEqual(['b:entries']);
    expect(t.begin('a', 2).status).toBe('new');
  });

  it('sequences_out_of_order_retire_by_ack_like_in_order_ones', () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    for (const seq of [2, 0, 5, 3, 1, 4]) {
      t.begin('a', seq);
      t.complete('a', seq, bytes(seq));
    }
    t.ack('a', 3);
    expect(t.stats().entries).toBe(3);
    for (const seq of [0, 1, 2])
      expect(codeOf(() => t.begin('a', seq))).toBe('ERR_RPC_DEDUP_EXPIRED');
    for (const seq of [3, 4, 5])
      expect(t.begin('a', seq)).toEqual({ status: 'done', reply: bytes(seq) });
    expect(t.resumeState('a')).toMatchObject({ floor: 3, done: [3, 4, 5], running: [] });
  });

  it('a_throwing_onEvict_never_breaks_the_operation_that_evicted', async () => {
    const seen: number[] = [];
    const t = new DeduplicationTable({
      maxSessions: 1,
      onEvict: () => {
        seen.push(t.stats().sessions); // called when the operation is over
        throw new Error('listener bug');
      },
    });
    const uncaught: unknown[] = [];
    const listeners = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    process.on('uncaughtException', (err) => uncaught.push(err));
    try {
      t.openSession('a');
      t.openSession('b');
      expect(t.sessionIds()).toEqual(['b']);
      expect(seen).toEqual([1]);
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.removeAllListeners('uncaughtException');
      for (const l of listeners) process.on('uncaughtException', l);
    }
    expect(uncaught).toEqual([expect.objectContaining({ message: 'listener bug' })]);
  });

  it('resume_state_tells_what_was_executed_and_an_evicted_session_cannot_resume', () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    for (const seq of [0, 1, 2]) t.begin('a', seq);
    t.complete('a', 0, bytes());
    t.complete('a', 2, bytes());
    t.ack('a', 1);
    expect(t.resumeState('a')).toEqual({ floor: 1, done: [2], running: [1] });
    t.evictSession('a');
    expect(codeOf(() => t.resumeState('a'))).toBe('ERR_RPC_SESSION_EVICTED');
  });

  it('max_sessions_evicts_on_open', () => {
    const t = new DeduplicationTable({ maxSessions: 2 });
    t.openSession('a');
    t.openSession('b');
    t.begin('a', 0); // 'b' is now the least recently used
    t.openSession('c');
    expect(t.sessionIds()).toEqual(['a', 'c']);
    expect(codeOf(() => t.begin('b', 0))).toBe('ERR_RPC_SESSION_EVICTED');
    expect(codeOf(() => t.begin('zz', 0))).toBe('ERR_RPC_SESSION_UNKNOWN');
  });

  it('abandoned_execution_runs_again_and_its_duplicates_learn_why', async () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    t.begin('a', 0);
    const dup = t.begin('a', 0);
    t.abandon('a', 0, new Error('shutting down'));
    if (dup.status !== 'in-progress') throw new Error('unreachable');
    await expect(dup.reply).rejects.toMatchObject({
      code: 'ERR_RPC_DEDUP_ABANDONED',
      retryable: true,
    });
    expect(t.begin('a', 0).status).toBe('new');
  });

  it('complete_without_begin_is_an_invalid_state', () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    expect(codeOf(() => t.complete('a', 0, bytes()))).toBe('ERR_RPC_INVALID_STATE');
    expect(codeOf(() => t.openSession('a'))).toBe('ERR_RPC_INVALID_STATE');
  });

  it('save_and_restore_round_trip_into_a_fresh_table', () => {
    const t = new DeduplicationTable();
    t.openSession('a', 5);
    t.openSession('b');
    t.begin('a', 5);
    t.complete('a', 5, bytes(1, 2));
    t.begin('a', 6); // running: not saved
    t.begin('b', 0);
    t.complete('b', 0, new Uint8Array(100_000)); // dropped (> 64 KiB) but executed
    const saved = t.save();
    const r = new DeduplicationTable();
    r.restore(saved);
    expect(r.sessionIds()).toEqual(['a', 'b']);
    expect(r.floorOf('a')).toBe(5);
    expect(r.begin('a', 5)).toEqual({ status: 'done', reply: bytes(1, 2) });
    expect(r.begin('a', 6).status).toBe('new');
    expect(codeOf(() => r.begin('b', 0))).toBe('ERR_RPC_DEDUP_REPLY_DROPPED');
    expect(r.save().length).toBeGreaterThan(0);
  });

  it('restore_names_the_offset_of_corrupt_or_truncated_input', () => {
    const t = new DeduplicationTable();
    t.openSession('a');
    t.begin('a', 0);
    t.complete('a', 0, bytes(1, 2, 3));
    const saved = t.save();
    const fail = (b: Uint8Array): RpcDecodeError => {
      const fresh = new DeduplicationTable();
      try {
        fresh.restore(b);
      } catch (err) {
        expect(err).toBeInstanceOf(RpcDecodeError);
        expect(fresh.stats().sessions).toBe(0);
        return err as RpcDecodeError;
      }
      throw new Error('restore accepted bad input');
    };
    expect(fail(saved.subarray(0, 10))).toMatchObject({
      code: 'ERR_RPC_DEDUP_CORRUPT',
      offset: 10,
    });
    expect(fail(saved.subarray(0, saved.length - 1))).toMatchObject({
      offset: saved.length - 1,
    });
    const magic = saved.slice();
    magic[0] = 0;
    expect(fail(magic).offset).toBe(0);
    const version = saved.slice();
    version[5] = 9;
    expect(fail(version)).toMatchObject({ offset: 4 });
    const flipped = saved.slice();
    flipped[20] = (flipped[20] as number) ^ 1;
    expect(fail(flipped)).toMatchObject({ offset: saved.length - 4 }); // the checksum
    const longer = new Uint8Array(saved.length + 1);
    longer.set(saved);
    expect(fail(longer)).toMatchObject({ offset: saved.length });
  });

  it('restore_refuses_state_beyond_its_bounds_and_while_running', () => {
    const t = new DeduplicationTable();
    for (const id of ['a', 'b', 'c']) t.openSession(id);
    const small = new DeduplicationTable({ maxSessions: 2 });
    expect(codeOf(() => small.restore(t.save()))).toBe('ERR_RPC_DEDUP_RESTORE_LIMIT');
    small.openSession('x');
    small.begin('x', 0);
    expect(codeOf(() => small.restore(new DeduplicationTable().save()))).toBe(
      'ERR_RPC_INVALID_STATE',
    );
  });

  it('bad_arguments_are_typed_mistakes', () => {
    expect(codeOf(() => new DeduplicationTable({ maxSessions: 0 }))).toBe('ERR_RPC_INVALID_ARG');
    expect(
      codeOf(() => new DeduplicationTable({ maxEntriesPerSession: 10, maxTotalEntries: 5 })),
    ).toBe('ERR_RPC_INVALID_ARG');
    expect(codeOf(() => new DeduplicationTable({ nope: 1 } as never))).toBe('ERR_RPC_INVALID_ARG');
    const t = new DeduplicationTable();
    expect(codeOf(() => t.openSession('bad id'))).toBe('ERR_RPC_INVALID_ARG');
    t.openSession('a');
    expect(codeOf(() => t.begin('a', -1))).toBe('ERR_RPC_INVALID_ARG');
    expect(codeOf(() => t.begin('a', 1.5))).toBe('ERR_RPC_INVALID_ARG');
    expect(codeOf(() => t.begin('a', 0, Number.NaN))).toBe('ERR_RPC_INVALID_ARG');
    expect(codeOf(() => t.restore('x' as never))).toBe('ERR_RPC_INVALID_ARG');
  });
});

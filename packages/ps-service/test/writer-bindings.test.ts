// WriterBindings on its own: the rules of writer-abuse.test.ts without a network, and its
// memory following use (bindings of sessions gone are swept).
import { expect, it } from 'vitest';
import { WriterBindings } from '../src/index.js';

function setup(o: { maxWritersPerSession?: number; maxNewWritersPerPeer?: number } = {}) {
  const active = new Set<string>();
  /** The store's last applied seq per writer (a writer it knows). */
  const known = new Map<string, number>();
  const w = new WriterBindings(
    o,
    (s) => active.has(s),
    (x) => known.get(x),
  );
  /** The service's order: admit, the store takes the push (knows the writer), bind. */
  const push = (
    writer: string,
    sessionId: string,
    peer = 'h1',
    seq = (known.get(writer) ?? 0) + 1,
  ) => {
    const origin = { sessionId, peer };
    const a = w.admit(writer, seq, origin);
    known.set(writer, Math.max(seq, known.get(writer) ?? 0));
    w.bind(writer, origin, a);
  };
  return { w, active, known, push };
}

it('a_writer_is_held_by_its_active_session_and_taken_over_once_that_is_gone', () => {
  const { w, active, push } = setup();
  active.add('s1').add('s2');
  push('wa', 's1');
  expect(() => push('wa', 's2')).toThrow(
    expect.objectContaining({ code: 'ERR_PS_REQUEST_WRITER_IN_USE' }),
  );
  active.delete('s1');
  push('wa', 's2');
  active.add('s1'); // back, but the writer moved on
  expect(() => push('wa', 's1')).toThrow(
    expect.objectContaining({ code: 'ERR_PS_REQUEST_WRITER_IN_USE' }),
  );
  expect(w.admit('wa', 9, { sessionId: undefined, peer: undefined })).toBe('bound'); // not RPC
});

it('a_resend_of_an_applied_push_passes_while_the_old_session_still_holds_the_writer', () => {
  // The client lost the reply to seq 1, its RPC session failed and it opened s2 before the
  // server saw s1 close: the resend must reach the store (which answers "duplicate"), not be
  // refused as "nothing applied".
  const { w, active, push } = setup();
  active.add('s1').add('s2');
  push('wa', 's1', 'h1', 1);
  expect(w.admit('wa', 1, { sessionId: 's2', peer: 'h1' })).toBe('bound');
  // A push the store has not applied is still refused while s1 holds the writer.
  expect(() => push('wa', 's2', 'h1', 2)).toThrow(
    expect.objectContaining({ code: 'ERR_PS_REQUEST_WRITER_IN_USE' }),
  );
});

it('per_session_and_per_peer_bounds_and_the_quota_frees_as_the_store_forgets', () => {
  const { active, known, push } = setup({ maxWritersPerSession: 2, maxNewWritersPerPeer: 3 });
  for (const s of ['s1', 's2', 's3']) active.add(s);
  push('w1', 's1');
  push('w2', 's1');
  expect(() => push('w3', 's1')).toThrow(
    expect.objectContaining({ code: 'ERR_PS_REQUEST_TOO_MANY_WRITERS' }),
  );
  push('w3', 's2');
  expect(() => push('w4', 's2')).toThrow(
    expect.objectContaining({ code: 'ERR_PS_REQUEST_WRITER_QUOTA', retryable: false }),
  );
  push('w4', 's3', 'h2'); // another host
  known.delete('w1'); // the store forgot an idle writer: its slot counts no more
  push('w5', 's2');
});

it('bindings_of_sessions_gone_are_swept_so_memory_follows_use', () => {
  const { w, active, push } = setup({ maxNewWritersPerPeer: 1 << 20 });
  for (let i = 0; i < 10_000; i++) {
    const s = `s${i}`;
    active.add(s);
    push(`w${i}`, s);
    active.delete(s); // its client went away
  }
  expect(w.size).toBeLessThan(4096 + 1);
});

it('options_are_checked', () => {
  for (const bad of [{ maxWritersPerSession: 0 }, { maxNewWritersPerPeer: 1.5 }]) {
    expect(() => setup(bad)).toThrow(expect.objectContaining({ code: 'ERR_PS_SERVICE_CONFIG' }));
  }
});

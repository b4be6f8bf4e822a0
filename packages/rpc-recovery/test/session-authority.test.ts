import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { resumptionProof, SessionAuthority } from '../src/index.js';
import { codeOf } from './support/codeOf.js';

const KEY = new Uint8Array(32).fill(7);

function clock() {
  let t = 0;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe('SessionAuthority', () => {
  it('resume_with_the_token_increments_the_epoch', () => {
    const a = new SessionAuthority({ key: KEY });
    const s = a.issue();
    expect(s.sessionId).toMatch(/^[0-9a-f]{32}$/);
    expect(s.token.length).toBe(32);
    expect(s.epoch).toBe(1);
    for (const epoch of [2, 3, 4]) {
      const c = a.challenge(s.sessionId);
      expect(a.resume(s.sessionId, c, resumptionProof(s.token, s.sessionId, c))).toEqual({
        sessionId: s.sessionId,
        epoch,
      });
    }
    expect(a.epochOf(s.sessionId)).toBe(4);
    expect(a.stats()).toMatchObject({ issued: 1, resumed: 3, badProofs: 0 });
  });

  it('stolen_session_id_alone_resumes_nothing', () => {
    const a = new SessionAuthority({ key: KEY });
    const victim = a.issue();
    const thief = a.issue(); // a real token, but for another session
    const c0 = a.challenge(victim.sessionId);
    expect(codeOf(() => a.resume(victim.sessionId, c0, new Uint8Array(32)))).toBe('ERR_RPC_AUTH');
    const c = a.challenge(victim.sessionId);
    const wrongToken = resumptionProof(thief.token, victim.sessionId, c);
    expect(codeOf(() => a.resume(victim.sessionId, c, wrongToken))).toBe('ERR_RPC_AUTH');
    expect(a.epochOf(victim.sessionId)).toBe(1);
    expect(a.stats().badProofs).toBe(2);
  });

  it('a_challenge_is_single_use_and_a_captured_proof_does_not_replay', () => {
    const a = new SessionAuthority({ key: KEY });
    const s = a.issue();
    const c = a.challenge(s.sessionId);
    const proof = resumptionProof(s.token, s.sessionId, c);
    a.resume(s.sessionId, c, proof);
    expect(codeOf(() => a.resume(s.sessionId, c, proof))).toBe('ERR_RPC_AUTH'); // spent
    const fresh = a.challenge(s.sessionId);
    expect(codeOf(() => a.resume(s.sessionId, fresh, proof))).toBe('ERR_RPC_AUTH'); // old proof
  });

  it('a_failed_attempt_spends_the_challenge', () => {
    const a = new SessionAuthority({ key: KEY });
    const s = a.issue();
    const c = a.challenge(s.sessionId);
    expect(codeOf(() => a.resume(s.sessionId, c, new Uint8Array(3)))).toBe('ERR_RPC_AUTH');
    expect(codeOf(() => a.resume(s.sessionId, c, resumptionProof(s.token, s.sessionId, c)))).toBe(
      'ERR_RPC_AUTH',
    );
  });

  it('random_proofs_never_resume', () => {
    const a = new SessionAuthority({ key: KEY });
    const s = a.issue();
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (proof) => {
        const c = a.challenge(s.sessionId);
        expect(codeOf(() => a.resume(s.sessionId, c, proof))).toBe('ERR_RPC_AUTH');
      }),
    );
    expect(a.epochOf(s.sessionId)).toBe(1);
  });

  it('a_third_party_asking_for_challenges_cannot_cancel_the_holders_resume', () => {
    const a = new SessionAuthority({ key: KEY, maxChallengesPerSession: 4 });
    const s = a.issue();
    const mine = a.challenge(s.sessionId);
    // Anyone who knows the id asks again and again, and answers badly.
    const theirs = [a.challenge(s.sessionId), a.challenge(s.sessionId), a.challenge(s.sessionId)];
    expect(codeOf(() => a.challenge(s.sessionId))).toBe('ERR_RPC_SESSION_BUSY');
    for (const c of theirs) {
      expect(codeOf(() => a.resume(s.sessionId, c, new Uint8Array(32)))).toBe('ERR_RPC_AUTH');
    }
    // The holder's challenge is still outstanding and resumes.
    expect(a.resume(s.sessionId, mine, resumptionProof(s.token, s.sessionId, mine)).epoch).toBe(2);
    expect(a.stats()).toMatchObject({ busy: 1, badProofs: 3, resumed: 1 });
  });

  it('challenges_expire_and_withdrawn_ones_free_their_slot', () => {
    const c = clock();
    const a = new SessionAuthority({
      key: KEY,
      now: c.now,
      challengeTtlMs: 10,
      maxChallengesPerSession: 2,
    });
    const s = a.issue();
    const first = a.challenge(s.sessionId);
    a.challenge(s.sessionId);
    expect(codeOf(() => a.challenge(s.sessionId))).toBe('ERR_RPC_SESSION_BUSY');
    expect(a.withdraw(s.sessionId, first)).toBe(true);
    expect(a.withdraw(s.sessionId, first)).toBe(false);
    const third = a.challenge(s.sessionId);
    c.advance(11);
    expect(
      codeOf(() => a.resume(s.sessionId, third, resumptionProof(s.token, s.sessionId, third))),
    ).toBe('ERR_RPC_SESSION_EXPIRED');
    a.challenge(s.sessionId); // the other one expired too: its slot is reclaimed
    const fresh = a.challenge(s.sessionId);
    expect(a.resume(s.sessionId, fresh, resumptionProof(s.token, s.sessionId, fresh)).epoch).toBe(
      2,
    );
  });

  it('idle_sessions_and_slow_answers_expire', () => {
    const c = clock();
    const a = new SessionAuthority({ key: KEY, now: c.now, sessionTtlMs: 100, challengeTtlMs: 10 });
    const s = a.issue();
    const ch = a.challenge(s.sessionId);
    c.advance(11);
    expect(codeOf(() => a.resume(s.sessionId, ch, resumptionProof(s.token, s.sessionId, ch)))).toBe(
      'ERR_RPC_SESSION_EXPIRED',
    );
    c.advance(90); // idle for 101 ms
    expect(codeOf(() => a.touch(s.sessionId))).toBe('ERR_RPC_SESSION_EXPIRED');
  });

  it('touch_postpones_expiry_and_an_idle_session_is_gone', () => {
    const c = clock();
    const a = new SessionAuthority({ key: KEY, now: c.now, sessionTtlMs: 100 });
    const s = a.issue();
    c.advance(90);
    a.touch(s.sessionId);
    c.advance(90);
    expect(a.has(s.sessionId)).toBe(true);
    c.advance(11);
    expect(a.has(s.sessionId)).toBe(false);
    expect(codeOf(() => a.challenge(s.sessionId))).toBe('ERR_RPC_SESSION_EXPIRED');
    expect(codeOf(() => a.challenge(s.sessionId))).toBe('ERR_RPC_SESSION_UNKNOWN');
  });

  it('restarted_server_with_the_same_key_resumes_adopted_sessions', () => {
    const s = new SessionAuthority({ key: KEY }).issue();
    const again = new SessionAuthority({ key: KEY });
    expect(codeOf(() => again.challenge(s.sessionId))).toBe('ERR_RPC_SESSION_UNKNOWN');
    again.adopt(s.sessionId, 5);
    const c = again.challenge(s.sessionId);
    expect(again.resume(s.sessionId, c, resumptionProof(s.token, s.sessionId, c)).epoch).toBe(6);
    const otherKey = new SessionAuthority({ key: randomBytes(32) });
    otherKey.adopt(s.sessionId, 5);
    const c2 = otherKey.challenge(s.sessionId);
    expect(
      codeOf(() => otherKey.resume(s.sessionId, c2, resumptionProof(s.token, s.sessionId, c2))),
    ).toBe('ERR_RPC_AUTH');
  });

  it('resume_moves_past_the_epoch_the_client_last_saw', () => {
    const first = new SessionAuthority({ key: KEY });
    const s = first.issue();
    for (let i = 0; i < 4; i++) {
      const c = first.challenge(s.sessionId);
      first.resume(s.sessionId, c, resumptionProof(s.token, s.sessionId, c));
    }
    expect(first.epochOf(s.sessionId)).toBe(5);
    const restarted = new SessionAuthority({ key: KEY });
    restarted.adopt(s.sessionId, 1); // epochs were not persisted
    const c = restarted.challenge(s.sessionId);
    expect(
      restarted.resume(s.sessionId, c, resumptionProof(s.token, s.sessionId, c), 5).epoch,
    ).toBe(6);
    const c2 = restarted.challenge(s.sessionId);
    expect(
      restarted.resume(s.sessionId, c2, resumptionProof(s.token, s.sessionId, c2), 2).epoch,
    ).toBe(7);
    const c3 = restarted.challenge(s.sessionId);
    const proof = resumptionProof(s.token, s.sessionId, c3);
    expect(codeOf(() => restarted.resume(s.sessionId, c3, proof, 0xffff_ffff))).toBe(
      'ERR_RPC_INVALID_STATE',
    );
    expect(codeOf(() => restarted.resume(s.sessionId, c3, proof, -1))).toBe('ERR_RPC_INVALID_ARG');
  });

  it('max_sessions_drops_expired_then_refuses_rather_than_evicting_a_live_one', () => {
    const c = clock();
    const a = new SessionAuthority({ key: KEY, now: c.now, maxSessions: 2, sessionTtlMs: 100 });
    const first = a.issue();
    c.advance(50);
    const second = a.issue();
    c.advance(60); // first is expired now
    const third = a.issue();
    expect(a.stats()).toMatchObject({ sessions: 2, expired: 1, evicted: 0 });
    a.touch(second.sessionId);
    // Both may still resume: a flood of issues is refused, neither is evicted.
    expect(codeOf(() => a.issue())).toBe('ERR_RPC_SESSION_LIMIT');
    expect(a.has(second.sessionId)).toBe(true);
    expect(a.has(third.sessionId)).toBe(true);
    expect(codeOf(() => a.challenge(first.sessionId))).toBe('ERR_RPC_SESSION_UNKNOWN');
    expect(a.stats()).toMatchObject({ evicted: 0, refusedFull: 1 });
    // Adopting (a restart's restored sessions) still makes room by the least recently active.
    a.adopt('restored-1', 1);
    expect(codeOf(() => a.challenge(third.sessionId))).toBe('ERR_RPC_SESSION_UNKNOWN');
    expect(a.stats().evicted).toBe(1);
    // Once one expires, issuing works again.
    c.advance(101);
    a.issue();
  });

  it('ids_come_from_the_injected_random_source_and_never_repeat', () => {
    let n = 0;
    const a = new SessionAuthority({
      key: KEY,
      randomBytes: (len) => new Uint8Array(len).fill(n++ < 3 ? 1 : n),
    });
    const one = a.issue();
    const two = a.issue(); // the first two draws repeat: drawn again
    expect(one.sessionId).toBe('01'.repeat(16));
    expect(two.sessionId).not.toBe(one.sessionId);
  });

  it('bad_options_and_arguments_are_typed_mistakes', () => {
    expect(codeOf(() => new SessionAuthority({ key: new Uint8Array(16) }))).toBe(
      'ERR_RPC_INVALID_ARG',
    );
    expect(codeOf(() => new SessionAuthority(undefined as never))).toBe('ERR_RPC_INVALID_ARG');
    expect(codeOf(() => new SessionAuthority({ key: KEY, ttl: 1 } as never))).toBe(
      'ERR_RPC_INVALID_ARG',
    );
    const a = new SessionAuthority({ key: KEY });
    expect(codeOf(() => a.challenge('../etc'))).toBe('ERR_RPC_INVALID_ARG');
    expect(codeOf(() => a.adopt('abc', 0))).toBe('ERR_RPC_INVALID_ARG');
    expect(codeOf(() => resumptionProof(new Uint8Array(5), 'abc', new Uint8Array(32)))).toBe(
      'ERR_RPC_INVALID_ARG',
    );
    const s = a.issue();
    expect(codeOf(() => a.adopt(s.sessionId, 1))).toBe('ERR_RPC_INVALID_STATE');
    expect(a.end(s.sessionId)).toBe(true);
    expect(a.end(s.sessionId)).toBe(false);
  });
});

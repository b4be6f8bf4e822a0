// A peer cannot exhaust the authority's memory: sessions it opens and challenges it holds
// are bounded per peer (remote host), while other peers keep being served.
import { TcpTransport } from '@rdmajs/tcp';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ExponentialBackoff,
  MethodRegistry,
  RpcClient,
  RpcError,
  RpcServer,
  SessionAuthority,
} from '../src/index.js';
import { codeOf } from './support/codeOf.js';

const KEY = new Uint8Array(32).fill(9);
const secret = 'rpc-peer-bounds-secret-0123456789';
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('per-peer bounds of SessionAuthority', () => {
  it('a_peer_cannot_hold_more_than_maxSessionsPerPeer_sessions', () => {
    let t = 0;
    const a = new SessionAuthority({
      key: KEY,
      maxSessionsPerPeer: 3,
      sessionTtlMs: 1000,
      now: () => t,
    });
    const mine = [a.issue('10.0.0.1'), a.issue('10.0.0.1'), a.issue('10.0.0.1')];
    expect(codeOf(() => a.issue('10.0.0.1'))).toBe('ERR_RPC_PEER_LIMIT');
    // Others are not crowded out, and nobody was evicted to make room.
    expect(a.issue('10.0.0.2').epoch).toBe(1);
    expect(a.issue().epoch).toBe(1);
    expect(a.stats()).toMatchObject({ sessions: 5, evicted: 0, peerLimited: 1, peers: 2 });
    // A session ended frees its slot; expired ones do too.
    a.end(mine[0]?.sessionId as string);
    expect(a.issue('10.0.0.1').epoch).toBe(1);
    expect(codeOf(() => a.issue('10.0.0.1'))).toBe('ERR_RPC_PEER_LIMIT');
    t += 1001;
    expect(a.issue('10.0.0.1').epoch).toBe(1);
  });

  it('a_peer_cannot_hold_more_than_maxChallengesPerPeer_challenges_over_all_sessions', () => {
    let t = 0;
    const a = new SessionAuthority({
      key: KEY,
      maxChallengesPerPeer: 4,
      challengeTtlMs: 100,
      now: () => t,
    });
    const ids = Array.from({ length: 3 }, () => a.issue().sessionId);
    const held: [string, Uint8Array][] = [];
    for (let i = 0; i < 4; i++) {
      const id = ids[i % 3] as string;
      held.push([id, a.challenge(id, 'attacker')]);
    }
    for (const id of ids)
      expect(codeOf(() => a.challenge(id, 'attacker'))).toBe('ERR_RPC_PEER_LIMIT');
    // The holder, elsewhere, still gets its challenge.
    expect(a.challenge(ids[0] as string, 'holder')).toHaveLength(32);
    // Withdrawn or spent challenges free the peer's slots; expired ones too.
    const [id0, c0] = held[0] as [string, Uint8Array];
    a.withdraw(id0, c0);
    expect(a.challenge(id0, 'attacker')).toHaveLength(32);
    t += 101;
    expect(a.challenge(ids[1] as string, 'attacker')).toHaveLength(32);
  });

  it('peer_bookkeeping_stays_bounded_by_what_is_held', () => {
    // Any sequence of operations: peers known never outnumber what live sessions hold, so
    // per-peer records are freed with the sessions and challenges they count.
    const op = fc.oneof(
      fc.record({ k: fc.constant('issue' as const), p: fc.integer({ min: 0, max: 5 }) }),
      fc.record({
        k: fc.constant('challenge' as const),
        p: fc.integer({ min: 0, max: 5 }),
        s: fc.nat(),
      }),
      fc.record({ k: fc.constant('end' as const), s: fc.nat() }),
      fc.record({ k: fc.constant('withdraw' as const), s: fc.nat() }),
      fc.record({ k: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 60 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        let t = 0;
        const a = new SessionAuthority({
          key: KEY,
          maxSessions: 16,
          maxSessionsPerPeer: 3,
          maxChallengesPerPeer: 2,
          maxChallengesPerSession: 2,
          sessionTtlMs: 200,
          challengeTtlMs: 50,
          now: () => t,
        });
        const ids: string[] = [];
        const challenges: [string, Uint8Array][] = [];
        for (const o of ops) {
          try {
            if (o.k === 'issue') ids.push(a.issue(`p${o.p}`).sessionId);
            else if (o.k === 'challenge' && ids.length > 0) {
              const id = ids[o.s % ids.length] as string;
              challenges.push([id, a.challenge(id, `p${o.p}`)]);
            } else if (o.k === 'end' && ids.length > 0) a.end(ids[o.s % ids.length] as string);
            else if (o.k === 'withdraw' && challenges.length > 0) {
              const [id, c] = challenges[o.s % challenges.length] as [string, Uint8Array];
              a.withdraw(id, c);
            } else if (o.k === 'tick') t += o.ms;
          } catch (err) {
            expect(err).toBeInstanceOf(RpcError);
          }
          const st = a.stats();
          expect(st.sessions).toBeLessThanOrEqual(16);
          // Each peer holds a live session or one of its (at most 2) challenges.
          expect(st.peers).toBeLessThanOrEqual(st.sessions * 3);
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe('per-peer bounds over TcpTransport', () => {
  it('server_refuses_sessions_beyond_the_peer_bound_and_serves_again_when_one_ends', async () => {
    const reg = new MethodRegistry();
    reg.register('echo', (p) => p.slice(), { idempotent: true });
    const authority = new SessionAuthority({ key: KEY, maxSessionsPerPeer: 2 });
    const server = new RpcServer(reg, { authority });
    const transport = new TcpTransport();
    const listener = await transport.listen({ secret });
    listener.on('connection', (c) => server.serve(c));
    cleanups.push(() => listener.close());
    const connect = () =>
      RpcClient.connect({
        transport,
        port: listener.port,
        secret,
        backoff: new ExponentialBackoff({ baseMs: 5, capMs: 10, maxAttempts: 2 }),
      });
    const first = await connect();
    const second = await connect();
    cleanups.push(() => second.close());
    const err = await connect().catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'ERR_RPC_SESSION_FAILED',
      cause: { code: 'ERR_RPC_PEER_LIMIT' },
    });
    expect(server.stats().refused).toBeGreaterThanOrEqual(1);
    expect(authority.stats()).toMatchObject({ sessions: 2, peers: 1 });
    // The first client says goodbye: its slot is free.
    await first.close();
    for (let i = 0; i < 200 && authority.stats().sessions > 1; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const third = await connect();
    cleanups.push(() => third.close());
    expect([...(await third.call('echo', new Uint8Array([5]), { idempotent: true }))]).toEqual([5]);
  });
});

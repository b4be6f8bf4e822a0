import { createHmac, randomBytes as cryptoRandomBytes, timingSafeEqual } from 'node:crypto';
import { RpcError, SessionNotFoundError } from './errors.js';
import {
  checkBytes,
  checkFunction,
  checkInt,
  checkKnownKeys,
  checkNumber,
  checkSessionId,
  ownOptions,
} from './internal/validate.js';

/** Bytes of a token, a challenge and a proof (HMAC-SHA256 outputs and nonces). */
export const SESSION_SECRET_BYTES = 32;
/** Bytes of randomness in a session id (it is written as twice as many hex digits). */
export const SESSION_ID_BYTES = 16;
/** Largest epoch; a session resumed this often must be opened anew. */
export const MAX_EPOCH = 0xffff_ffff;

// Domain separation: a token is never a valid proof, nor a proof a token.
const TOKEN_LABEL = 'rdmajs/rpc/session-token/v1\0';
const PROOF_LABEL = 'rdmajs/rpc/resume-proof/v1\0';

export interface SessionAuthorityOptions {
  /** The server's secret key (>= 32 bytes; copied). Tokens survive a restart only with the same key. */
  key: Uint8Array;
  /** A session idle (no issue, resume or touch) this long expires. Default 10 minutes. */
  sessionTtlMs?: number;
  /** A challenge unanswered this long expires. Default 10 s. */
  challengeTtlMs?: number;
  /**
   * Challenges outstanding per session at once (one per resume attempt, e.g. per connection).
   * A new one beyond it is refused (ERR_RPC_SESSION_BUSY), never made by cancelling another:
   * whoever knows a session id cannot spend the holder's challenge. Default 8.
   */
  maxChallengesPerSession?: number;
  /**
   * Sessions kept; issuing one more first drops expired ones, and is refused
   * (ERR_RPC_SESSION_LIMIT, retryable) when all may still resume: a flood of new sessions
   * never evicts a live one (its client would fail ERR_RPC_SESSION_UNKNOWN for good). `adopt`
   * drops the least recently active instead. Default 65 536.
   */
  maxSessions?: number;
  /**
   * Live sessions one peer (the `peer` named at `issue`, e.g. the remote host) may hold; one
   * more is refused (ERR_RPC_PEER_LIMIT), so a peer cannot crowd others out of `maxSessions`.
   * Default 1 024.
   */
  maxSessionsPerPeer?: number;
  /** Outstanding challenges one peer may hold over all sessions (ERR_RPC_PEER_LIMIT beyond). Default 64. */
  maxChallengesPerPeer?: number;
  /** Milliseconds on a monotonic line; default `performance.now`. */
  now?: () => number;
  /** Cryptographically random bytes; default `crypto.randomBytes`. */
  randomBytes?: (n: number) => Uint8Array;
}

/** What the server hands the client when a session starts (over the authenticated handshake). */
export interface IssuedSession {
  /** 32 hex digits of fresh randomness: names the session, proves nothing. */
  readonly sessionId: string;
  /** The client's secret for resuming; HMAC of the id under the server key. Never sent again. */
  readonly token: Uint8Array;
  readonly epoch: number;
}

export interface SessionAuthorityStats {
  sessions: number;
  issued: number;
  resumed: number;
  /** Resumes refused for a wrong proof or a missing challenge. */
  badProofs: number;
  /** Challenges refused because the session had `maxChallengesPerSession` outstanding. */
  busy: number;
  expired: number;
  evicted: number;
  /** Peers holding sessions or challenges now. */
  peers: number;
  /** Issues and challenges refused by the per-peer bounds. */
  peerLimited: number;
  /** Issues refused because `maxSessions` live sessions are held. */
  refusedFull: number;
}

interface Challenge {
  expires: number;
  /** Who asked for it (counted against that peer), if named. */
  peer: string | undefined;
}

interface SessionRecord {
  epoch: number;
  lastActive: number;
  /** The peer that opened it (counted against that peer), if named. */
  peer: string | undefined;
  /** Outstanding challenges (hex); at most maxChallengesPerSession. */
  challenges: Map<string, Challenge>;
}

/** What one peer holds now; dropped when empty, so peers known are bounded by what is held. */
interface PeerRecord {
  sessions: Set<string>;
  /** Challenge hex → its session id. */
  challenges: Map<string, string>;
}

const MAX_PEER_NAME = 256;

const KEYS = [
  'key',
  'sessionTtlMs',
  'challengeTtlMs',
  'maxChallengesPerSession',
  'maxSessions',
  'maxSessionsPerPeer',
  'maxChallengesPerPeer',
  'now',
  'randomBytes',
];

function hmac(key: Uint8Array, label: string, ...parts: (string | Uint8Array)[]): Uint8Array {
  const h = createHmac('sha256', key).update(label);
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
}

/**
 * The client's answer to a resumption challenge: HMAC-SHA256 under its token of the session
 * id and the server's fresh challenge. Proves the token without revealing it, and is useless
 * for any other challenge.
 */
export function resumptionProof(
  token: Uint8Array,
  sessionId: string,
  challenge: Uint8Array,
): Uint8Array {
  checkBytes('token', token, SESSION_SECRET_BYTES, SESSION_SECRET_BYTES);
  checkSessionId(sessionId);
  checkBytes('challenge', challenge, SESSION_SECRET_BYTES, SESSION_SECRET_BYTES);
  return hmac(token, PROOF_LABEL, sessionId, '\0', challenge);
}

/**
 * Server side of session identity. `issue()` creates a session: a random id and a token
 * derived from the server key (so a restarted server with the same key can still verify it;
 * `adopt` re-admits sessions it restored). Resuming takes a fresh single-use `challenge` and
 * the client's `resumptionProof` over it: a stolen session id alone resumes nothing, a
 * captured proof is useless for the next challenge, and each challenge allows one attempt.
 * Challenges are per attempt (bounded, expiring), so asking for one cancels no other.
 * Proofs are compared in constant time. Each resume increments the session's epoch.
 */
export class SessionAuthority {
  private readonly key: Uint8Array;
  private readonly sessionTtlMs: number;
  private readonly challengeTtlMs: number;
  private readonly maxChallenges: number;
  private readonly maxSessions: number;
  private readonly maxSessionsPerPeer: number;
  private readonly maxChallengesPerPeer: number;
  private readonly peers = new Map<string, PeerRecord>();
  private readonly now: () => number;
  private readonly randomBytes: (n: number) => Uint8Array;
  /** Insertion order is least recently active first (activity re-inserts). */
  private readonly sessions = new Map<string, SessionRecord>();
  private readonly counters = {
    issued: 0,
    resumed: 0,
    badProofs: 0,
    busy: 0,
    expired: 0,
    evicted: 0,
    peerLimited: 0,
    refusedFull: 0,
  };

  /** Live sessions it holds at most (`maxSessions`); RpcServer sizes its de-dup table to it. */
  get sessionLimit(): number {
    return this.maxSessions;
  }

  constructor(options: SessionAuthorityOptions) {
    const o = ownOptions('SessionAuthority options', options);
    checkKnownKeys('SessionAuthority', o, KEYS);
    this.key = Uint8Array.prototype.slice.call(checkBytes('key', o.key, SESSION_SECRET_BYTES));
    this.sessionTtlMs =
      o.sessionTtlMs === undefined ? 600_000 : checkNumber('sessionTtlMs', o.sessionTtlMs, 1);
    this.challengeTtlMs =
      o.challengeTtlMs === undefined ? 10_000 : checkNumber('challengeTtlMs', o.challengeTtlMs, 1);
    this.maxChallenges =
      o.maxChallengesPerSession === undefined
        ? 8
        : checkInt('maxChallengesPerSession', o.maxChallengesPerSession, 1, 1024);
    this.maxSessions =
      o.maxSessions === undefined ? 65_536 : checkInt('maxSessions', o.maxSessions, 1);
    this.maxSessionsPerPeer =
      o.maxSessionsPerPeer === undefined
        ? 1024
        : checkInt('maxSessionsPerPeer', o.maxSessionsPerPeer, 1);
    this.maxChallengesPerPeer =
      o.maxChallengesPerPeer === undefined
        ? 64
        : checkInt('maxChallengesPerPeer', o.maxChallengesPerPeer, 1);
    this.now = o.now === undefined ? () => performance.now() : checkFunction('now', o.now);
    this.randomBytes =
      o.randomBytes === undefined
        ? (n) => new Uint8Array(cryptoRandomBytes(n))
        : checkFunction('randomBytes', o.randomBytes);
  }

  /**
   * Starts a session at epoch 1. Hand `sessionId` and `token` to the client, and only to it.
   * `peer` (e.g. the remote host) counts it against that peer's `maxSessionsPerPeer`.
   */
  issue(peer?: string): IssuedSession {
    const t = this.time();
    const p = this.peerName(peer);
    if (p !== undefined) {
      const held = this.peers.get(p);
      if (held !== undefined && held.sessions.size >= this.maxSessionsPerPeer) {
        // Its expired sessions make room first.
        for (const id of [...held.sessions]) {
          const s = this.sessions.get(id);
          if (s !== undefined && t - s.lastActive > this.sessionTtlMs) {
            this.drop(id, s);
            this.counters.expired++;
          }
        }
        if (held.sessions.size >= this.maxSessionsPerPeer) {
          this.counters.peerLimited++;
          throw new RpcError(
            'ERR_RPC_PEER_LIMIT',
            `peer ${p} holds ${held.sessions.size} sessions (maxSessionsPerPeer)`,
            { retryable: true },
          );
        }
      }
    }
    this.makeRoom(t, false);
    let sessionId: string;
    do {
      sessionId = Buffer.from(this.random(SESSION_ID_BYTES)).toString('hex');
    } while (this.sessions.has(sessionId));
    this.sessions.set(sessionId, {
      epoch: 1,
      lastActive: t,
      peer: p,
      challenges: new Map(),
    });
    if (p !== undefined) this.peerRecord(p).sessions.add(sessionId);
    this.counters.issued++;
    return { sessionId, token: this.tokenOf(sessionId), epoch: 1 };
  }

  /**
   * Re-admits a session this server (or an earlier run with the same key) issued, e.g. after
   * restoring its de-duplication table at start-up (`table.sessionIds()`), at the epoch it
   * had if known (else 1: the client's `lastEpoch` at resume moves it past its own). Its
   * client resumes as usual, with the token it holds.
   */
  adopt(sessionId: string, epoch: number): void {
    checkSessionId(sessionId);
    checkInt('epoch', epoch, 1, MAX_EPOCH);
    if (this.sessions.has(sessionId)) {
      throw new RpcError('ERR_RPC_INVALID_STATE', `session ${sessionId} is already known`);
    }
    const t = this.time();
    this.makeRoom(t, true);
    this.sessions.set(sessionId, {
      epoch,
      lastActive: t,
      peer: undefined,
      challenges: new Map(),
    });
  }

  /**
   * A fresh challenge for one attempt to resume `sessionId` (single use, expires after
   * `challengeTtlMs`). Several may be outstanding (one per connection trying); asking for
   * one never cancels another, so a third party who knows the id cannot break the holder's
   * resume. ERR_RPC_SESSION_BUSY (retryable) when `maxChallengesPerSession` are outstanding
   * and unexpired; ERR_RPC_SESSION_UNKNOWN / ERR_RPC_SESSION_EXPIRED for a session that
   * cannot resume.
   */
  challenge(sessionId: string, peer?: string): Uint8Array {
    const t = this.time();
    const p = this.peerName(peer);
    const s = this.live(sessionId, t);
    if (s.challenges.size >= this.maxChallenges) {
      for (const [c, ch] of s.challenges) if (t > ch.expires) this.spend(s, c);
    }
    const held = p === undefined ? undefined : this.peers.get(p);
    if (held !== undefined && held.challenges.size >= this.maxChallengesPerPeer) {
      for (const [c, id] of [...held.challenges]) {
        const owner = this.sessions.get(id);
        const ch = owner?.challenges.get(c);
        if (owner !== undefined && ch !== undefined && t > ch.expires) this.spend(owner, c);
      }
      if (held.challenges.size >= this.maxChallengesPerPeer) {
        this.counters.peerLimited++;
        throw new RpcError(
          'ERR_RPC_PEER_LIMIT',
          `peer ${p}: ${held.challenges.size} resume attempts outstanding (maxChallengesPerPeer)`,
          { retryable: true },
        );
      }
    }
    if (s.challenges.size >= this.maxChallenges) {
      this.counters.busy++;
      throw new RpcError(
        'ERR_RPC_SESSION_BUSY',
        `session ${sessionId}: ${this.maxChallenges} resume attempts outstanding`,
        { retryable: true },
      );
    }
    const c = this.random(SESSION_SECRET_BYTES);
    const hex = Buffer.from(c).toString('hex');
    s.challenges.set(hex, { expires: t + this.challengeTtlMs, peer: p });
    if (p !== undefined) this.peerRecord(p).challenges.set(hex, sessionId);
    return c;
  }

  /**
   * Gives up an outstanding challenge (its connection went away before answering). Returns
   * false when it was not outstanding.
   */
  withdraw(sessionId: string, challenge: Uint8Array): boolean {
    checkSessionId(sessionId);
    checkBytes('challenge', challenge);
    const s = this.sessions.get(sessionId);
    return s === undefined ? false : this.spend(s, Buffer.from(challenge).toString('hex'));
  }

  /**
   * Verifies the client's proof over `challenge` (one this authority issued for the session
   * and that is still outstanding: the server passes the one it sent on this connection)
   * and moves the session to its next epoch, which it returns: above both the server's and
   * `lastEpoch`, the last one the client saw (a server restarted from persisted state may
   * not know it; a client claiming more only moves its own epochs). That challenge is spent
   * either way; others stay outstanding. ERR_RPC_AUTH for a wrong proof or a challenge not
   * outstanding, ERR_RPC_SESSION_EXPIRED for an expired session or challenge,
   * ERR_RPC_SESSION_UNKNOWN for a session not known here.
   */
  resume(
    sessionId: string,
    challenge: Uint8Array,
    proof: Uint8Array,
    lastEpoch = 0,
  ): { sessionId: string; epoch: number } {
    checkBytes('challenge', challenge);
    checkBytes('proof', proof);
    checkInt('lastEpoch', lastEpoch, 0, MAX_EPOCH);
    const t = this.time();
    const s = this.live(sessionId, t);
    const hex = Buffer.from(challenge).toString('hex');
    const expires = s.challenges.get(hex)?.expires;
    this.spend(s, hex);
    if (expires === undefined || challenge.length !== SESSION_SECRET_BYTES) {
      this.counters.badProofs++;
      throw new RpcError('ERR_RPC_AUTH', `session ${sessionId}: no such challenge outstanding`);
    }
    if (t > expires) {
      throw new RpcError('ERR_RPC_SESSION_EXPIRED', `session ${sessionId}: challenge expired`);
    }
    const expected = hmac(this.tokenOf(sessionId), PROOF_LABEL, sessionId, '\0', challenge);
    // Length first: timingSafeEqual throws on unequal lengths, and the length is no secret.
    if (proof.length !== expected.length || !timingSafeEqual(proof, expected)) {
      this.counters.badProofs++;
      throw new RpcError('ERR_RPC_AUTH', `session ${sessionId}: resumption proof rejected`);
    }
    const base = Math.max(s.epoch, lastEpoch);
    if (base >= MAX_EPOCH) {
      throw new RpcError('ERR_RPC_INVALID_STATE', `session ${sessionId}: epochs exhausted`);
    }
    s.epoch = base + 1;
    this.activate(sessionId, s, t);
    this.counters.resumed++;
    return { sessionId, epoch: s.epoch };
  }

  /** Records activity (a call on the session), postponing its expiry. */
  touch(sessionId: string): void {
    const t = this.time();
    this.activate(sessionId, this.live(sessionId, t), t);
  }

  /** The session's current epoch (errors as for `challenge`). */
  epochOf(sessionId: string): number {
    return this.live(sessionId, this.time()).epoch;
  }

  /** True while the session is known and not expired. */
  has(sessionId: string): boolean {
    const s = this.sessions.get(sessionId);
    return s !== undefined && this.time() - s.lastActive <= this.sessionTtlMs;
  }

  /** Forgets a session (its client said goodbye). Returns false when it was not known. */
  end(sessionId: string): boolean {
    const s = this.sessions.get(sessionId);
    if (s === undefined) return false;
    this.drop(sessionId, s);
    return true;
  }

  stats(): SessionAuthorityStats {
    return { sessions: this.sessions.size, peers: this.peers.size, ...this.counters };
  }

  private peerName(peer: string | undefined): string | undefined {
    if (peer === undefined) return undefined;
    if (typeof peer !== 'string' || peer.length === 0 || peer.length > MAX_PEER_NAME) {
      throw new RpcError('ERR_RPC_INVALID_ARG', `peer must be a string of 1..${MAX_PEER_NAME}`);
    }
    return peer;
  }

  private peerRecord(p: string): PeerRecord {
    let r = this.peers.get(p);
    if (r === undefined) {
      r = { sessions: new Set(), challenges: new Map() };
      this.peers.set(p, r);
    }
    return r;
  }

  private forgetIfEmpty(p: string, r: PeerRecord): void {
    if (r.sessions.size === 0 && r.challenges.size === 0) this.peers.delete(p);
  }

  /** Removes one outstanding challenge (and its peer's count). */
  private spend(s: SessionRecord, hex: string): boolean {
    const ch = s.challenges.get(hex);
    if (ch === undefined) return false;
    s.challenges.delete(hex);
    const r = ch.peer === undefined ? undefined : this.peers.get(ch.peer);
    if (r !== undefined) {
      r.challenges.delete(hex);
      this.forgetIfEmpty(ch.peer as string, r);
    }
    return true;
  }

  /** Forgets a session with its challenges and its peer's counts. */
  private drop(id: string, s: SessionRecord): void {
    for (const hex of [...s.challenges.keys()]) this.spend(s, hex);
    this.sessions.delete(id);
    const r = s.peer === undefined ? undefined : this.peers.get(s.peer);
    if (r !== undefined) {
      r.sessions.delete(id);
      this.forgetIfEmpty(s.peer as string, r);
    }
  }

  private tokenOf(sessionId: string): Uint8Array {
    return hmac(this.key, TOKEN_LABEL, sessionId);
  }

  private live(sessionId: string, t: number): SessionRecord {
    checkSessionId(sessionId);
    const s = this.sessions.get(sessionId);
    if (s === undefined) throw new SessionNotFoundError('ERR_RPC_SESSION_UNKNOWN', sessionId);
    if (t - s.lastActive > this.sessionTtlMs) {
      this.drop(sessionId, s);
      this.counters.expired++;
      throw new RpcError('ERR_RPC_SESSION_EXPIRED', `session ${sessionId} expired`);
    }
    return s;
  }

  private activate(sessionId: string, s: SessionRecord, t: number): void {
    s.lastActive = t;
    this.sessions.delete(sessionId);
    this.sessions.set(sessionId, s);
  }

  /** Room for one more session: expired ones go; live ones only for `evictLive` (adopt). */
  private makeRoom(t: number, evictLive: boolean): void {
    if (this.sessions.size < this.maxSessions) return;
    // Least recently active first: expired sessions sit at the front.
    for (const [id, s] of this.sessions) {
      if (t - s.lastActive <= this.sessionTtlMs) break;
      this.drop(id, s);
      this.counters.expired++;
    }
    if (!evictLive && this.sessions.size >= this.maxSessions) {
      this.counters.refusedFull++;
      throw new RpcError(
        'ERR_RPC_SESSION_LIMIT',
        `${this.sessions.size} live sessions (maxSessions): a new one is refused`,
        { retryable: true },
      );
    }
    while (this.sessions.size >= this.maxSessions) {
      const [id, s] = this.sessions.entries().next().value as [string, SessionRecord];
      this.drop(id, s);
      this.counters.evicted++;
    }
  }

  private time(): number {
    const t = this.now();
    if (typeof t !== 'number' || Number.isNaN(t)) {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'now() must return a number');
    }
    return t;
  }

  private random(n: number): Uint8Array {
    const b = this.randomBytes(n);
    if (!(b instanceof Uint8Array) || b.length !== n) {
      throw new RpcError('ERR_RPC_INVALID_ARG', `randomBytes(${n}) must return ${n} bytes`);
    }
    return Uint8Array.prototype.slice.call(b);
  }
}

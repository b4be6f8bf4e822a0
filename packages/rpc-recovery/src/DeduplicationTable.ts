import {
  DedupAbandonedError,
  DedupExpiredError,
  DedupReplyDroppedError,
  DedupSessionFullError,
  DedupTableFullError,
} from './dedupErrors.js';
import { RpcError, SessionNotFoundError } from './errors.js';
import { decodeDedupState, encodeDedupState, type SavedSession } from './internal/dedupCodec.js';
import {
  checkBytes,
  checkFunction,
  checkInt,
  checkKnownKeys,
  checkSessionId,
  ownOptions,
} from './internal/validate.js';

/** Why a whole session was evicted. */
export type DedupEvictReason = 'sessions' | 'entries' | 'bytes' | 'explicit';

export interface DeduplicationTableOptions {
  /**
   * Sessions kept at once; opening one more evicts the least recently used that may be
   * evicted (see `guardEviction`), or is refused (ERR_RPC_DEDUP_TABLE_FULL). Default 4096.
   */
  maxSessions?: number;
  /**
   * Sessions one peer (the `peer` named at `openSession`) may hold; one more first evicts that
   * peer's own evictable sessions, else is refused (ERR_RPC_PEER_LIMIT). Default 1024.
   */
  maxSessionsPerPeer?: number;
  /** Unacknowledged requests kept per session; more are refused (ERR_RPC_DEDUP_SESSION_FULL). Default 1024. */
  maxEntriesPerSession?: number;
  /** Bytes of stored replies per session; beyond, the oldest replies are dropped (their requests stay executed). Default 1 MiB. */
  maxBytesPerSession?: number;
  /** Requests kept over all sessions; beyond, least recently used sessions are evicted. Default 262 144. */
  maxTotalEntries?: number;
  /**
   * Unacknowledged requests one peer (the `peer` named at `openSession`) may hold over all its
   * sessions; more are refused (ERR_RPC_PEER_LIMIT), so one host that never acknowledges
   * cannot fill `maxTotalEntries` for everyone. Default 32 768 (an eighth of the total).
   */
  maxEntriesPerPeer?: number;
  /** Bytes of stored replies over all sessions; beyond, least recently used sessions are evicted. Default 64 MiB. */
  maxTotalBytes?: number;
  /** A larger reply is not stored: its request is remembered as executed, reply dropped. Default 64 KiB. */
  maxReplyBytes?: number;
  /** Evicted session ids remembered, so their requests fail as evicted rather than unknown. Default 4096. */
  maxEvictedRemembered?: number;
  /**
   * Called after a whole session was evicted (never for closeSession), once the operation
   * that evicted it has finished. An exception it throws is re-thrown asynchronously (an
   * uncaught exception), never into the table's operation.
   */
  onEvict?: (sessionId: string, reason: DedupEvictReason) => void;
}

/** What `begin` found for a request. */
export type DedupBegin =
  /** Never seen: execute it, then `complete` (or `abandon` if nothing was applied). */
  | { readonly status: 'new' }
  /** Executed before: send this stored reply again. */
  | { readonly status: 'done'; readonly reply: Uint8Array }
  /** Executing now: this promise settles with the first execution's reply (never a second run). */
  | { readonly status: 'in-progress'; readonly reply: Promise<Uint8Array> };

/** A session's requests as the table knows them (see `resumeState`). */
export interface DedupResumeState {
  /** Every request below this is acknowledged or forgotten: never executed again. */
  readonly floor: number;
  /** Executed requests at or above the floor, ascending. */
  readonly done: readonly number[];
  /** Requests executing now, ascending. */
  readonly running: readonly number[];
}

export interface DeduplicationTableStats {
  sessions: number;
  entries: number;
  /** Requests executing now (between `begin` → 'new' and `complete`/`abandon`). */
  running: number;
  /** Bytes of stored replies. */
  bytes: number;
  /** Duplicates answered from the table (stored or shared reply). */
  duplicates: number;
  /** Requests refused as below the session's floor. */
  expired: number;
  /** Replies dropped (their requests stay executed) to respect byte bounds. */
  repliesDropped: number;
  /** Whole sessions evicted. */
  sessionsEvicted: number;
}

const NEW: DedupBegin = Object.freeze({ status: 'new' });

interface Deferred {
  promise: Promise<Uint8Array>;
  resolve: (reply: Uint8Array) => void;
  reject: (err: Error) => void;
}

interface Entry {
  /** 'running' until complete(); 'done' with the reply, or null when it was dropped. */
  state: 'running' | 'done';
  reply: Uint8Array | null;
  /** Created on the first duplicate only, so a lone execution allocates no promise. */
  shared: Deferred | undefined;
}

interface Session {
  readonly id: string;
  /** Who opened it (counted against that peer), if named. */
  readonly peer: string | undefined;
  /** Every request below this was acknowledged by the client or is forgotten: refused. */
  floor: number;
  /** Sequences with an entry, ascending (requests mostly arrive in order: appends). */
  readonly order: number[];
  readonly entries: Map<number, Entry>;
  bytes: number;
  running: number;
}

const DEFAULTS = {
  maxSessions: 4096,
  maxSessionsPerPeer: 1024,
  maxEntriesPerSession: 1024,
  maxBytesPerSession: 1 << 20,
  maxTotalEntries: 262_144,
  maxEntriesPerPeer: 32_768,
  maxTotalBytes: 64 << 20,
  maxReplyBytes: 64 << 10,
  maxEvictedRemembered: 4096,
} as const;

const OPTION_KEYS = [...Object.keys(DEFAULTS), 'onEvict'];

/** Index of the first element of sorted `a` that is >= x. */
function lowerBound(a: readonly number[], x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((a[mid] as number) < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function deferred(): Deferred {
  let resolve!: (reply: Uint8Array) => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<Uint8Array>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * Server-side at-most-once table for non-idempotent requests, keyed by (session id,
 * sequence). A request is new (execute it), in progress (a duplicate shares the first run's
 * reply), done (the stored reply is sent again) or expired (below what the table remembers:
 * a typed error, never a second execution). The client piggybacks "every reply below N
 * received" (`ackBelow`) so entries retire. Bounded per session and in total; a whole session
 * evicted to respect the total bounds fails its later requests and its resume with a typed
 * error. `save()`/`restore()` let a service persist the table with its own state.
 *
 * Pure bookkeeping: no I/O, no timers. A duplicate's wait is bounded by the caller's deadline.
 */
export class DeduplicationTable {
  private readonly maxSessions: number;
  private readonly maxSessionsPerPeer: number;
  private readonly maxEntriesPerSession: number;
  private readonly maxEntriesPerPeer: number;
  private readonly maxBytesPerSession: number;
  private readonly maxTotalEntries: number;
  private readonly maxTotalBytes: number;
  private readonly maxReplyBytes: number;
  private readonly maxEvictedRemembered: number;
  private readonly onEvict: ((sessionId: string, reason: DedupEvictReason) => void) | undefined;

  /** Insertion order is least recently used first (a touch re-inserts). */
  private readonly sessions = new Map<string, Session>();
  /** The session last in `sessions` when known (undefined: not known): its touch is a no-op. */
  private newest: Session | undefined;
  private readonly evicted = new Set<string>();
  /** Peer → its open sessions; dropped when empty. */
  private readonly peers = new Map<string, Set<string>>();
  /** Peer → requests its sessions hold (entries); dropped at 0. */
  private readonly peerEntries = new Map<string, number>();
  /** True for a session that must not be evicted (it may still resume); see guardEviction. */
  private isLive: ((sessionId: string) => boolean) | undefined;
  /** Evictions of the running operation, reported to onEvict when it ends. */
  private readonly toNotify: [string, DedupEvictReason][] = [];
  private totalEntries = 0;
  private totalBytes = 0;
  private totalRunning = 0;
  private duplicates = 0;
  private expiredCount = 0;
  private repliesDropped = 0;
  private sessionsEvicted = 0;

  constructor(options?: DeduplicationTableOptions) {
    const o = ownOptions('DeduplicationTable options', options, true);
    checkKnownKeys('DeduplicationTable', o, OPTION_KEYS);
    const int = (k: keyof typeof DEFAULTS, min: number, max?: number): number =>
      o[k] === undefined ? Math.min(DEFAULTS[k], max ?? DEFAULTS[k]) : checkInt(k, o[k], min, max);
    this.maxSessions = int('maxSessions', 1);
    this.maxSessionsPerPeer = int('maxSessionsPerPeer', 1, this.maxSessions);
    this.maxTotalEntries = int('maxTotalEntries', 1);
    this.maxEntriesPerSession = int('maxEntriesPerSession', 1, this.maxTotalEntries);
    this.maxEntriesPerPeer = int('maxEntriesPerPeer', 1, this.maxTotalEntries);
    this.maxTotalBytes = int('maxTotalBytes', 0);
    this.maxBytesPerSession = int('maxBytesPerSession', 0, this.maxTotalBytes);
    this.maxReplyBytes = int('maxReplyBytes', 0, 2 ** 32 - 1);
    this.maxEvictedRemembered = int('maxEvictedRemembered', 0);
    this.onEvict =
      o.onEvict === undefined
        ? undefined
        : checkFunction<(sessionId: string, reason: DedupEvictReason) => void>(
            'onEvict',
            o.onEvict,
          );
  }

  /**
   * Sessions the bounds may evict from now on are only those `isLive` says false for (a
   * server passes "its authority no longer knows it": ended, expired or never issued), so a
   * flood of new sessions or requests is refused (ERR_RPC_DEDUP_TABLE_FULL, retryable) rather
   * than evicting a session whose client can still resume. RpcServer installs it. A reply that
   * finds no room is dropped instead (its request stays executed).
   */
  guardEviction(isLive: (sessionId: string) => boolean): void {
    this.isLive = checkFunction('isLive', isLive);
  }

  /**
   * Starts remembering a session; its first request is `firstSeq` (default 0). `peer` (e.g.
   * the remote host) counts it against that peer's `maxSessionsPerPeer`. Opening one more
   * than `maxSessions` evicts the least recently used evictable one, or is refused. Session
   * ids must be fresh (the server issues random ones): reopening a forgotten id would let its
   * old requests run again.
   */
  openSession(sessionId: string, firstSeq = 0, peer?: string): void {
    checkSessionId(sessionId);
    checkInt('firstSeq', firstSeq, 0);
    if (
      peer !== undefined &&
      (typeof peer !== 'string' || peer.length === 0 || peer.length > 256)
    ) {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'peer must be a string of 1..256');
    }
    if (this.sessions.has(sessionId)) {
      throw new RpcError('ERR_RPC_INVALID_STATE', `session ${sessionId} is already open`);
    }
    const held = peer === undefined ? undefined : this.peers.get(peer);
    if (held !== undefined && held.size >= this.maxSessionsPerPeer) {
      // Its own sessions that may go make room first; nobody else's is evicted for it.
      for (const id of held) {
        if (this.isLive?.(id) !== true) {
          this.evict(this.sessions.get(id) as Session, 'sessions');
          break;
        }
      }
      if (held.size >= this.maxSessionsPerPeer) {
        this.notify();
        throw new RpcError(
          'ERR_RPC_PEER_LIMIT',
          `peer ${peer} holds ${held.size} de-duplication sessions (maxSessionsPerPeer)`,
          { retryable: true },
        );
      }
    }
    while (this.sessions.size >= this.maxSessions) {
      if (!this.evictLru(undefined, 'sessions')) {
        this.notify();
        throw new DedupTableFullError(`${this.sessions.size} sessions, none may be evicted`);
      }
    }
    this.evicted.delete(sessionId);
    if (peer !== undefined) {
      if (held === undefined) this.peers.set(peer, new Set([sessionId]));
      else held.add(sessionId);
    }
    const s: Session = {
      id: sessionId,
      peer,
      floor: firstSeq,
      order: [],
      entries: new Map(),
      bytes: 0,
      running: 0,
    };
    this.sessions.set(sessionId, s);
    this.newest = s;
    this.notify();
  }

  /** True while the session is open (not closed, evicted or never opened). */
  hasSession(sessionId: string): boolean {
    return this.sessions.has(sessionId);
  }

  /** Open session ids, least recently used first (e.g. to re-admit sessions after a restore). */
  sessionIds(): string[] {
    return [...this.sessions.keys()];
  }

  /**
   * What the server holds for a session, for the recovery exchange after a reconnection:
   * its floor, the sequences executed (replies kept or dropped) and those still running,
   * ascending. ERR_RPC_SESSION_EVICTED / ERR_RPC_SESSION_UNKNOWN when the session cannot
   * resume: call it before accepting a resume.
   */
  resumeState(sessionId: string): DedupResumeState {
    const s = this.live(sessionId);
    const done: number[] = [];
    const running: number[] = [];
    for (const seq of s.order) {
      if (seq < s.floor) continue; // acknowledged while running: the client has its reply
      ((s.entries.get(seq) as Entry).state === 'done' ? done : running).push(seq);
    }
    return { floor: s.floor, done, running };
  }

  /** The lowest sequence still answered for a session (every request below it is refused). */
  floorOf(sessionId: string): number {
    return this.live(sessionId).floor;
  }

  /**
   * Forgets a session the client ended. Duplicates waiting on its running requests fail with
   * ERR_RPC_SESSION_UNKNOWN. Returns false when it was not open.
   */
  closeSession(sessionId: string): boolean {
    const s = this.sessions.get(sessionId);
    if (s === undefined) return false;
    this.drop(s, new SessionNotFoundError('ERR_RPC_SESSION_UNKNOWN', sessionId));
    return true;
  }

  /** Evicts a session: its later requests and its resume fail with ERR_RPC_SESSION_EVICTED. */
  evictSession(sessionId: string): boolean {
    const s = this.sessions.get(sessionId);
    if (s === undefined) return false;
    this.evict(s, 'explicit');
    this.notify();
    return true;
  }

  /**
   * Looks a request up before executing it. `ackBelow` is the client's piggybacked "every
   * reply below this sequence received": those entries retire first. Throws (never returns
   * 'new' for) a request that must not run: ERR_RPC_DEDUP_EXPIRED below the floor,
   * ERR_RPC_DEDUP_REPLY_DROPPED when executed but its reply is gone,
   * ERR_RPC_DEDUP_SESSION_FULL (retryable) at the per-session bound, and
   * ERR_RPC_SESSION_UNKNOWN / ERR_RPC_SESSION_EVICTED for a session not open.
   */
  begin(sessionId: string, seq: number, ackBelow?: number): DedupBegin {
    const s = this.live(sessionId);
    checkInt('seq', seq, 0);
    if (ackBelow !== undefined) this.ackSession(s, checkInt('ackBelow', ackBelow, 0));
    this.touch(s);
    if (seq < s.floor) {
      this.expiredCount++;
      throw new DedupExpiredError(sessionId, seq, s.floor);
    }
    const e = s.entries.get(seq);
    if (e !== undefined) {
      this.duplicates++;
      if (e.state === 'running') {
        if (e.shared === undefined) {
          e.shared = deferred();
          // Handled here so that a rejection nobody awaits any more never crashes the process.
          e.shared.promise.catch(() => {});
        }
        return { status: 'in-progress', reply: e.shared.promise };
      }
      if (e.reply === null) throw new DedupReplyDroppedError(sessionId, seq);
      return { status: 'done', reply: e.reply };
    }
    if (s.entries.size >= this.maxEntriesPerSession) {
      throw new DedupSessionFullError(sessionId, this.maxEntriesPerSession);
    }
    if (s.peer !== undefined && (this.peerEntries.get(s.peer) ?? 0) >= this.maxEntriesPerPeer) {
      throw new RpcError(
        'ERR_RPC_PEER_LIMIT',
        `peer ${s.peer} holds ${this.maxEntriesPerPeer} unacknowledged requests (maxEntriesPerPeer)`,
        { retryable: true },
      );
    }
    while (this.totalEntries >= this.maxTotalEntries) {
      if (!this.evictLru(s, 'entries')) {
        this.notify();
        throw new DedupTableFullError(`${this.totalEntries} requests, no session may be evicted`);
      }
    }
    // Sequences mostly arrive in order: an append (no splice, which allocates its result).
    if (s.order.length === 0 || (s.order[s.order.length - 1] as number) < seq) s.order.push(seq);
    else s.order.splice(lowerBound(s.order, seq), 0, seq);
    s.entries.set(seq, { state: 'running', reply: null, shared: undefined });
    s.running++;
    this.totalRunning++;
    this.countEntries(s, 1);
    this.notify();
    return NEW;
  }

  /**
   * Records the reply of a request `begin` returned 'new' for, and hands it to duplicates
   * waiting on it. The bytes are copied. A reply beyond `maxReplyBytes` (or the session's
   * byte bound) is not kept: the request stays executed, its duplicates get
   * ERR_RPC_DEDUP_REPLY_DROPPED. Ignored when the session was closed or evicted meanwhile.
   */
  complete(sessionId: string, seq: number, reply: Uint8Array): void {
    checkBytes('reply', reply);
    const found = this.running(sessionId, seq);
    if (found === undefined) return;
    const [s, e] = found;
    e.state = 'done';
    s.running--;
    this.totalRunning--;
    const shared = e.shared;
    e.shared = undefined;
    if (seq < s.floor) {
      // Acknowledged while it ran (a client acking what it cannot have seen): nothing to keep.
      this.removeEntry(s, seq);
    } else if (
      reply.length > this.maxReplyBytes ||
      reply.length > this.maxBytesPerSession ||
      !this.makeRoom(s, reply.length)
    ) {
      this.repliesDropped++;
    } else {
      e.reply = Uint8Array.prototype.slice.call(reply);
      s.bytes += reply.length;
      this.totalBytes += reply.length;
    }
    shared?.resolve(e.reply ?? Uint8Array.prototype.slice.call(reply));
    this.notify();
  }

  /**
   * Forgets a running request whose execution applied nothing (it failed before any effect):
   * a retry will execute it. Duplicates waiting on it fail with ERR_RPC_DEDUP_ABANDONED
   * (retryable). Only for executions known to have had no effect; otherwise `complete` with
   * an error reply.
   */
  abandon(sessionId: string, seq: number, reason?: unknown): void {
    const found = this.running(sessionId, seq);
    if (found === undefined) return;
    const [s, e] = found;
    s.running--;
    this.totalRunning--;
    this.removeEntry(s, seq);
    e.shared?.reject(new DedupAbandonedError(sessionId, seq, reason));
  }

  /** The client received every reply below `below`: those entries retire, and the floor rises. */
  ack(sessionId: string, below: number): void {
    const s = this.live(sessionId);
    this.ackSession(s, checkInt('below', below, 0));
  }

  stats(): DeduplicationTableStats {
    return {
      sessions: this.sessions.size,
      entries: this.totalEntries,
      running: this.totalRunning,
      bytes: this.totalBytes,
      duplicates: this.duplicates,
      expired: this.expiredCount,
      repliesDropped: this.repliesDropped,
      sessionsEvicted: this.sessionsEvicted,
    };
  }

  /**
   * The table as bytes (versioned, CRC-32 checked), to persist with the service's state.
   * Requests still running are not saved: after a restore they count as never executed, so
   * save at a point where the service's state has none of their effects (a handler that
   * applies its effect and calls `complete` in the same tick never leaves one half-applied;
   * `stats().running` says whether any is running).
   */
  save(): Uint8Array {
    const sessions: SavedSession[] = [];
    for (const s of this.sessions.values()) {
      const entries: { seq: number; reply: Uint8Array | null }[] = [];
      for (const seq of s.order) {
        const e = s.entries.get(seq) as Entry;
        if (e.state === 'done') entries.push({ seq, reply: e.reply });
      }
      sessions.push({ id: s.id, floor: s.floor, entries });
    }
    return encodeDedupState(sessions);
  }

  /**
   * Replaces the table's contents with saved bytes. Corrupt or truncated input fails with
   * ERR_RPC_DEDUP_CORRUPT (its `offset` names the byte), contents beyond this table's bounds
   * with ERR_RPC_DEDUP_RESTORE_LIMIT; on failure the table is unchanged. Refused
   * (ERR_RPC_INVALID_STATE) while requests are running. Counters in `stats()` carry on.
   */
  restore(bytes: Uint8Array): void {
    checkBytes('bytes', bytes);
    if (this.totalRunning > 0) {
      throw new RpcError(
        'ERR_RPC_INVALID_STATE',
        `restore: ${this.totalRunning} requests are running; restore before serving`,
      );
    }
    const saved = decodeDedupState(bytes, {
      maxSessions: this.maxSessions,
      maxEntriesPerSession: this.maxEntriesPerSession,
      maxBytesPerSession: this.maxBytesPerSession,
      maxTotalEntries: this.maxTotalEntries,
      maxTotalBytes: this.maxTotalBytes,
      maxReplyBytes: this.maxReplyBytes,
    });
    this.sessions.clear();
    this.newest = undefined;
    this.evicted.clear();
    this.peers.clear();
    this.peerEntries.clear();
    this.totalEntries = 0;
    this.totalBytes = 0;
    for (const ss of saved) {
      const s: Session = {
        id: ss.id,
        peer: undefined,
        floor: ss.floor,
        order: [],
        entries: new Map(),
        bytes: 0,
        running: 0,
      };
      for (const { seq, reply } of ss.entries) {
        s.order.push(seq);
        s.entries.set(seq, { state: 'done', reply, shared: undefined });
        s.bytes += reply?.length ?? 0;
      }
      this.totalEntries += s.order.length;
      this.totalBytes += s.bytes;
      this.sessions.set(s.id, s);
    }
  }

  private live(sessionId: string): Session {
    const s = this.sessions.get(sessionId);
    if (s !== undefined) return s;
    checkSessionId(sessionId);
    throw new SessionNotFoundError(
      this.evicted.has(sessionId) ? 'ERR_RPC_SESSION_EVICTED' : 'ERR_RPC_SESSION_UNKNOWN',
      sessionId,
    );
  }

  /** The running entry of (session, seq), or undefined when the session is gone. */
  private running(sessionId: string, seq: number): [Session, Entry] | undefined {
    checkInt('seq', seq, 0);
    const s = this.sessions.get(sessionId);
    if (s === undefined) {
      // A session found was checked when opened: only an unknown id is checked here.
      checkSessionId(sessionId);
      return undefined;
    }
    const e = s.entries.get(seq);
    if (e === undefined || e.state !== 'running') {
      throw new RpcError(
        'ERR_RPC_INVALID_STATE',
        `session ${sessionId}: request ${seq} is not running (begin() did not return 'new' for it)`,
      );
    }
    return [s, e];
  }

  private touch(s: Session): void {
    // A session's requests mostly follow each other: re-inserting the newest changes nothing.
    if (this.newest === s) return;
    this.sessions.delete(s.id);
    this.sessions.set(s.id, s);
    this.newest = s;
  }

  private ackSession(s: Session, below: number): void {
    if (below <= s.floor) return;
    s.floor = below;
    let keep = 0;
    const order = s.order;
    let n = 0;
    while (n < order.length && (order[n] as number) < below) n++;
    for (let i = 0; i < n; i++) {
      const seq = order[i] as number;
      const e = s.entries.get(seq) as Entry;
      if (e.state === 'running') {
        order[keep++] = seq; // retired when it completes
      } else {
        s.entries.delete(seq);
        this.countEntries(s, -1);
        const len = e.reply?.length ?? 0;
        s.bytes -= len;
        this.totalBytes -= len;
      }
    }
    if (keep < n) {
      // In place (a splice allocates the removed elements' array).
      const len = order.length;
      for (let i = n; i < len; i++) order[keep + i - n] = order[i] as number;
      order.length = len - (n - keep);
    }
  }

  private removeEntry(s: Session, seq: number): void {
    const e = s.entries.get(seq);
    if (e === undefined) return;
    s.entries.delete(seq);
    const at = lowerBound(s.order, seq);
    s.order.splice(at, 1);
    this.countEntries(s, -1);
    const len = e.reply?.length ?? 0;
    s.bytes -= len;
    this.totalBytes -= len;
  }

  /**
   * Frees bytes for a reply of `len` in session `s`: its oldest replies first, then other
   * sessions. False when that needs a session that may not be evicted.
   */
  private makeRoom(s: Session, len: number): boolean {
    for (let i = 0; i < s.order.length && s.bytes + len > this.maxBytesPerSession; i++) {
      const e = s.entries.get(s.order[i] as number) as Entry;
      if (e.reply !== null) {
        s.bytes -= e.reply.length;
        this.totalBytes -= e.reply.length;
        e.reply = null;
        this.repliesDropped++;
      }
    }
    while (this.totalBytes + len > this.maxTotalBytes) {
      if (!this.evictLru(s, 'bytes')) return false;
    }
    return true;
  }

  /**
   * Evicts the least recently used session other than `keep` that may be evicted (see
   * `guardEviction`); false when there is none.
   */
  private evictLru(keep: Session | undefined, reason: DedupEvictReason): boolean {
    for (const s of this.sessions.values()) {
      if (s !== keep && this.isLive?.(s.id) !== true) {
        this.evict(s, reason);
        return true;
      }
    }
    return false;
  }

  private evict(s: Session, reason: DedupEvictReason): void {
    this.drop(s, new SessionNotFoundError('ERR_RPC_SESSION_EVICTED', s.id));
    this.sessionsEvicted++;
    if (this.maxEvictedRemembered > 0) {
      this.evicted.add(s.id);
      if (this.evicted.size > this.maxEvictedRemembered) {
        this.evicted.delete(this.evicted.values().next().value as string);
      }
    }
    if (this.onEvict !== undefined) this.toNotify.push([s.id, reason]);
  }

  private notify(): void {
    if (this.toNotify.length === 0) return;
    const onEvict = this.onEvict as (sessionId: string, reason: DedupEvictReason) => void;
    for (const [id, reason] of this.toNotify.splice(0)) {
      try {
        onEvict(id, reason);
      } catch (err) {
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }

  /** Requests held: over all sessions, and by the session's peer. */
  private countEntries(s: Session, delta: number): void {
    this.totalEntries += delta;
    if (s.peer === undefined) return;
    const n = (this.peerEntries.get(s.peer) ?? 0) + delta;
    if (n > 0) this.peerEntries.set(s.peer, n);
    else this.peerEntries.delete(s.peer);
  }

  private drop(s: Session, err: Error): void {
    this.sessions.delete(s.id);
    if (this.newest === s) this.newest = undefined;
    const held = s.peer === undefined ? undefined : this.peers.get(s.peer);
    if (held !== undefined) {
      held.delete(s.id);
      if (held.size === 0) this.peers.delete(s.peer as string);
    }
    this.countEntries(s, -s.entries.size);
    this.totalBytes -= s.bytes;
    this.totalRunning -= s.running;
    for (const e of s.entries.values()) e.shared?.reject(err);
  }
}

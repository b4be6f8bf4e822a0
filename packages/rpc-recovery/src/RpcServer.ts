import { SharedBudget } from '@rdmajs/flowctl';
import { type Channel, type Connection, hostKey, type InboundMessage } from '@rdmajs/mux';
import { DeduplicationTable } from './DeduplicationTable.js';
import { RpcError } from './errors.js';
import { ReplyBatch } from './internal/ReplyBatch.js';
import { RequestSlots } from './internal/RequestSlots.js';
import { checkFunction, checkInt } from './internal/validate.js';
import type { MethodRegistry } from './MethodRegistry.js';
import type { ReplyMemory } from './ReplyBuffer.js';
import { decodeRpcFrame, requestBudgetMs } from './RpcFrame.js';
import { SessionAuthority } from './SessionAuthority.js';
import {
  decodeSessionFrame,
  encodeSessionFrame,
  MAX_WELCOME_SEQS,
  RPC_CONTROL_CHANNEL,
  RPC_DATA_CHANNEL,
  type SessionFrame,
} from './SessionFrame.js';

export interface RpcServerOptions {
  /** Session authority (its key makes tokens survive a restart). One of `authority` or `key`. */
  authority?: SessionAuthority;
  /** The server key (>= 32 bytes) for a default SessionAuthority. */
  key?: Uint8Array;
  /**
   * Non-idempotent calls run at most once per (session, sequence). Default a new table. A
   * table restored from saved state re-admits its sessions, so their clients can resume.
   */
  dedup?: DeduplicationTable;
  /** A connection that has not opened or resumed a session by then is dropped, ms. Default 10 000. */
  handshakeTimeoutMs?: number;
  /**
   * A connection with no control frame (heartbeat) for this long is dropped, ms. Must exceed
   * the clients' heartbeat interval × misses. Default 30 000.
   */
  idleTimeoutMs?: number;
  /** See `DispatchScope.onRecorded`: persist the service's state with `dedup.save()` here. */
  onRecorded?: (sessionId: string, seq: number) => void;
  /**
   * Called synchronously when a session is opened in `dedup` (before its client learns of
   * it) or closed: persist `dedup.save()` here too, so a restart before the session's first
   * call still lets it resume.
   */
  onSessionChange?: (sessionId: string, change: 'opened' | 'closed') => void;
  /**
   * Calls one connection may have executing at once (from receipt until the reply went out).
   * Beyond it the server stops reading that connection's calls until one finishes
   * (backpressure: they wait in the transport's receive window, bounded by it), never
   * refuses them. Default 1024.
   */
  maxConcurrentRequests?: number;
  /** The same over every connection of this server (shared fairly between them). Default 65 536. */
  maxConcurrentRequestsTotal?: number;
  /**
   * `rpc` data channels one connection may open (the client opens one). One more fails the
   * connection (ERR_RPC_CHANNEL_LIMIT): each would start its own reader. Default 1.
   */
  maxDataChannels?: number;
  /** Connections served at once; one more is closed at once (ERR_RPC_CONNECTION_LIMIT). Default 65 536. */
  maxConnections?: number;
  /** The same per remote host (IPv6 by its /64). Default 1024. */
  maxConnectionsPerPeer?: number;
}

export interface RpcServerStats {
  connections: number;
  opened: number;
  resumed: number;
  /** Session handshakes refused (bad proof, unknown or evicted session, busy). */
  refused: number;
  /** Connections dropped for a protocol error, a missed handshake deadline or idleness. */
  dropped: number;
  /** Calls executing now (received, reply not yet sent), over every connection. */
  running: number;
  /** Calls that had to wait for a slot (`maxConcurrentRequests` or `…Total` reached). */
  throttled: number;
  /** Connections closed at once by `maxConnections` / `maxConnectionsPerPeer`. */
  connectionsRefused: number;
  /** Pongs not sent because the previous one to that peer was still queued (it does not read). */
  pongsSkipped: number;
  /**
   * Calls dropped unexecuted because their deadline budget ran out while they waited for a
   * slot (their callers had given up: ERR_RPC_DEADLINE there).
   */
  expired: number;
}

/** Per connection: see `RpcServer.serve`. */
export interface ServeOptions {
  /**
   * Where handlers' `context.allocateReply` builds this connection's replies: e.g. the RDMA
   * transport's registered memory, so replies go out without a copy. Default the heap.
   */
  replyMemory?: ReplyMemory;
}

interface ConnState {
  phase: 'hello' | 'challenged' | 'ready' | 'done';
  sessionId: string | undefined;
  lastEpoch: number;
  challenge: Uint8Array | undefined;
  epoch: number;
  lastSeen: number;
  control: Channel | undefined;
  /** This connection's calls executing; shared by its data channels. */
  slots: RequestSlots;
  /** The remote host (per-peer bounds). */
  peer: string;
  dataChannels: number;
  /** A pong is queued and not yet sent: the next ping gets none (a peer that never reads). */
  pongQueued: boolean;
}

/** Upper limit of both concurrency options: far beyond any sane setting, inside flowctl's range. */
const MAX_CONCURRENT_REQUESTS = 1 << 24;

/**
 * The remote host as per-peer bounds count it (the port changes per connection): mux's
 * `hostKey`, so IPv6 counts by its /64 — one host owns a whole /64, not one address of it.
 */
function peerOf(connection: Connection): string {
  const a = connection.remoteAddress;
  const colon = a.lastIndexOf(':');
  const host = colon > 0 ? a.slice(0, colon) : a;
  return host.length === 0 ? 'unknown' : hostKey(host).slice(0, 256);
}

/**
 * Serves a MethodRegistry on mux connections (any Transport). Each connection first opens
 * or resumes a session on its control channel: open issues a session id and a
 * secret-derived token; resume answers a fresh challenge with a proof of that token and
 * gets the next epoch plus what the de-duplication table holds for the session (the
 * recovery exchange). Only then are calls served, each tagged with the connection's epoch.
 * The control channel also carries heartbeats. A malformed frame destroys its connection;
 * nothing a peer sends throws.
 */
export class RpcServer {
  readonly #registry: MethodRegistry;
  readonly #authority: SessionAuthority;
  readonly #dedup: DeduplicationTable;
  readonly #handshakeTimeoutMs: number;
  readonly #idleTimeoutMs: number;
  readonly #onRecorded: ((sessionId: string, seq: number) => void) | undefined;
  readonly #onSessionChange: ((sessionId: string, change: 'opened' | 'closed') => void) | undefined;
  /** The connection each session is served on now; a resume elsewhere supersedes it. */
  readonly #live = new Map<string, Connection>();
  readonly #connections = new Set<Connection>();
  readonly #stats = {
    opened: 0,
    resumed: 0,
    refused: 0,
    dropped: 0,
    throttled: 0,
    connectionsRefused: 0,
    pongsSkipped: 0,
    expired: 0,
  };
  readonly #maxDataChannels: number;
  readonly #maxConnections: number;
  readonly #maxConnectionsPerPeer: number;
  /** Connections served per remote host; dropped when none. */
  readonly #perPeer = new Map<string, number>();
  readonly #maxConcurrentRequests: number;
  /** Calls executing over every connection. */
  readonly #requestBudget: SharedBudget;

  constructor(registry: MethodRegistry, options: RpcServerOptions) {
    this.#registry = registry;
    if (options.authority !== undefined) {
      if (!(options.authority instanceof SessionAuthority)) {
        throw new RpcError('ERR_RPC_INVALID_ARG', 'authority must be a SessionAuthority');
      }
      this.#authority = options.authority;
    } else if (options.key !== undefined) {
      this.#authority = new SessionAuthority({ key: options.key });
    } else {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'RpcServer needs an authority or a key');
    }
    // As many sessions as the authority issues: a live session is never evicted to make room
    // (a full table refuses new ones), so a smaller table would refuse sessions the authority
    // allows.
    this.#dedup =
      options.dedup ?? new DeduplicationTable({ maxSessions: this.#authority.sessionLimit });
    this.#handshakeTimeoutMs = checkInt(
      'handshakeTimeoutMs',
      options.handshakeTimeoutMs ?? 10_000,
      1,
    );
    this.#idleTimeoutMs = checkInt('idleTimeoutMs', options.idleTimeoutMs ?? 30_000, 1);
    this.#maxConcurrentRequests = checkInt(
      'maxConcurrentRequests',
      options.maxConcurrentRequests ?? 1024,
      1,
      MAX_CONCURRENT_REQUESTS,
    );
    const total = checkInt(
      'maxConcurrentRequestsTotal',
      options.maxConcurrentRequestsTotal ?? 65_536,
      this.#maxConcurrentRequests,
      MAX_CONCURRENT_REQUESTS,
    );
    this.#requestBudget = new SharedBudget({
      maxBytes: total,
      maxMessages: total,
      quantumBytes: 1,
    });
    this.#maxDataChannels = checkInt('maxDataChannels', options.maxDataChannels ?? 1, 1, 64);
    this.#maxConnections = checkInt('maxConnections', options.maxConnections ?? 65_536, 1);
    this.#maxConnectionsPerPeer = checkInt(
      'maxConnectionsPerPeer',
      options.maxConnectionsPerPeer ?? Math.min(1024, this.#maxConnections),
      1,
      this.#maxConnections,
    );
    this.#onRecorded =
      options.onRecorded === undefined
        ? undefined
        : checkFunction('onRecorded', options.onRecorded);
    this.#onSessionChange =
      options.onSessionChange === undefined
        ? undefined
        : checkFunction('onSessionChange', options.onSessionChange);
    // Sessions restored with the table resume with the tokens their clients hold.
    for (const id of this.#dedup.sessionIds()) {
      if (!this.#authority.has(id)) this.#authority.adopt(id, 1);
    }
    // A session its client may still resume is never evicted to make room for another: a
    // flood of sessions is refused instead (only ended or expired ones make room).
    this.#dedup.guardEviction((id) => this.#authority.has(id));
  }

  get authority(): SessionAuthority {
    return this.#authority;
  }

  get dedup(): DeduplicationTable {
    return this.#dedup;
  }

  /** True while the session is served on a connection (resumed or opened, not yet closed). */
  isConnected(sessionId: string): boolean {
    return this.#live.has(sessionId);
  }

  /** The connection a session is served on now, if any (what a handler may answer differently for). */
  connectionOf(sessionId: string): Connection | undefined {
    return this.#live.get(sessionId);
  }

  stats(): RpcServerStats {
    return {
      connections: this.#connections.size,
      ...this.#stats,
      running: this.#requestBudget.messagesInFlight,
    };
  }

  serve(connection: Connection, options: ServeOptions = {}): void {
    const replyMemory =
      options.replyMemory === undefined
        ? undefined
        : checkFunction<ReplyMemory>('replyMemory', options.replyMemory);
    if (connection.state === 'closed' || connection.state === 'failed') return; // nothing to serve
    const peer = peerOf(connection);
    const fromPeer = this.#perPeer.get(peer) ?? 0;
    if (this.#connections.size >= this.#maxConnections || fromPeer >= this.#maxConnectionsPerPeer) {
      this.#stats.connectionsRefused++;
      connection.on('error', () => {});
      connection.destroy(
        new RpcError(
          'ERR_RPC_CONNECTION_LIMIT',
          fromPeer >= this.#maxConnectionsPerPeer
            ? `peer ${peer} has ${fromPeer} connections (maxConnectionsPerPeer)`
            : `${this.#connections.size} connections (maxConnections)`,
          { retryable: true },
        ),
      );
      return;
    }
    this.#perPeer.set(peer, fromPeer + 1);
    const st: ConnState = {
      phase: 'hello',
      sessionId: undefined,
      lastEpoch: 0,
      challenge: undefined,
      epoch: 0,
      lastSeen: performance.now(),
      control: undefined,
      slots: new RequestSlots(this.#maxConcurrentRequests, this.#requestBudget),
      peer,
      dataChannels: 0,
      pongQueued: false,
    };
    this.#connections.add(connection);
    const drop = (
      why: string,
      code: 'ERR_RPC_PROTOCOL' | 'ERR_RPC_CHANNEL_LIMIT' = 'ERR_RPC_PROTOCOL',
    ): void => {
      if (st.phase === 'done') return;
      this.#stats.dropped++;
      connection.destroy(new RpcError(code, why));
    };
    const handshake = setTimeout(() => {
      if (st.phase !== 'ready') drop('no session handshake in time');
    }, this.#handshakeTimeoutMs);
    const idle = setInterval(
      () => {
        if (performance.now() - st.lastSeen > this.#idleTimeoutMs) drop('peer idle');
      },
      Math.max(10, this.#idleTimeoutMs / 4),
    );
    handshake.unref();
    idle.unref();
    connection.on('error', () => {});
    connection.once('close', () => {
      clearTimeout(handshake);
      clearInterval(idle);
      st.slots.close();
      this.#connections.delete(connection);
      const left = (this.#perPeer.get(peer) ?? 1) - 1;
      if (left > 0) this.#perPeer.set(peer, left);
      else this.#perPeer.delete(peer);
      if (st.sessionId !== undefined && st.challenge !== undefined) {
        this.#authority.withdraw(st.sessionId, st.challenge);
      }
      if (st.sessionId !== undefined && this.#live.get(st.sessionId) === connection) {
        this.#live.delete(st.sessionId);
      }
      st.phase = 'done';
    });
    connection.on('channel', (ch) => {
      if (ch.name === RPC_CONTROL_CHANNEL && st.control === undefined) {
        st.control = ch;
        void this.#control(connection, ch, st, drop);
      } else if (ch.name === RPC_DATA_CHANNEL && st.phase === 'ready') {
        if (++st.dataChannels > this.#maxDataChannels) {
          drop(`more than ${this.#maxDataChannels} data channels`, 'ERR_RPC_CHANNEL_LIMIT');
          return;
        }
        this.#serveData(connection, ch, st, replyMemory);
      } else {
        drop(`unexpected channel ${ch.name} in phase ${st.phase}`);
      }
    });
  }

  async #control(
    connection: Connection,
    ch: Channel,
    st: ConnState,
    drop: (why: string) => void,
  ): Promise<void> {
    const send = (f: SessionFrame, version?: number): void => {
      ch.send(encodeSessionFrame(f, version)).catch(() => {});
    };
    // The version byte of the peer's last control frame: a refusal for speaking another
    // version is sent in that one, so the peer can read why it ends.
    let peerVersion: number | undefined;
    const refuse = (err: unknown): void => {
      this.#stats.refused++;
      const code = (err as { code?: unknown }).code;
      send(
        {
          kind: 'refused',
          code:
            typeof code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(code) ? code : 'ERR_RPC_AUTH',
          message: err instanceof Error ? (err.message.split('\n', 1)[0] ?? '') : 'refused',
        },
        peerVersion,
      );
      st.phase = 'done';
      void connection.close({ timeoutMs: 1000 }).catch(() => {});
    };
    try {
      for (;;) {
        const msg = await ch.receive({ copy: true, timeoutMs: this.#idleTimeoutMs });
        let f: SessionFrame;
        try {
          peerVersion = msg.bytes[1];
          f = decodeSessionFrame(msg.bytes);
        } finally {
          msg.release();
        }
        st.lastSeen = performance.now();
        if (st.phase === 'hello' && f.kind === 'open') {
          let issued: ReturnType<SessionAuthority['issue']>;
          try {
            issued = this.#authority.issue(st.peer);
          } catch (err) {
            refuse(err);
            return;
          }
          try {
            this.#dedup.openSession(issued.sessionId, 0, st.peer);
          } catch (err) {
            // Full of sessions that may still resume, or this peer's share is: refused, not evicted.
            this.#authority.end(issued.sessionId);
            refuse(err);
            return;
          }
          this.#onSessionChange?.(issued.sessionId, 'opened');
          this.#ready(connection, st, issued.sessionId, issued.epoch);
          this.#stats.opened++;
          send({
            kind: 'welcome',
            sessionId: issued.sessionId,
            epoch: issued.epoch,
            token: issued.token,
            floor: 0,
            done: [],
            running: [],
          });
        } else if (st.phase === 'hello' && f.kind === 'resume') {
          try {
            st.challenge = this.#authority.challenge(f.sessionId, st.peer);
          } catch (err) {
            refuse(err);
            return;
          }
          st.sessionId = f.sessionId;
          st.lastEpoch = f.lastEpoch;
          st.phase = 'challenged';
          send({ kind: 'challenge', challenge: st.challenge });
        } else if (st.phase === 'challenged' && f.kind === 'proof') {
          const id = st.sessionId as string;
          const challenge = st.challenge as Uint8Array;
          st.challenge = undefined;
          let epoch: number;
          let state: ReturnType<DeduplicationTable['resumeState']>;
          try {
            state = this.#dedup.resumeState(id);
            epoch = this.#authority.resume(id, challenge, f.proof, st.lastEpoch).epoch;
          } catch (err) {
            this.#authority.withdraw(id, challenge);
            refuse(err);
            return;
          }
          // The session moved here: its old connection's calls have no one to answer.
          this.#live.get(id)?.destroy(new RpcError('ERR_RPC_CLOSED', 'session resumed elsewhere'));
          this.#ready(connection, st, id, epoch);
          this.#stats.resumed++;
          // The lists only inform the client (the floor decides); keep them within a frame.
          const done = state.done.slice(0, MAX_WELCOME_SEQS);
          const running = state.running.slice(0, MAX_WELCOME_SEQS - done.length);
          send({
            kind: 'welcome',
            sessionId: id,
            epoch,
            token: undefined,
            floor: state.floor,
            done,
            running,
          });
        } else if (st.phase === 'ready' && f.kind === 'ping') {
          // One pong queued at most: a peer that pings but never reads gets no more queued.
          if (st.pongQueued) this.#stats.pongsSkipped++;
          else {
            st.pongQueued = true;
            const sent = (): void => {
              st.pongQueued = false;
            };
            ch.send(encodeSessionFrame({ kind: 'pong', nonce: f.nonce })).then(sent, sent);
          }
          try {
            this.#authority.touch(st.sessionId as string);
          } catch {
            // Expired meanwhile: the next resume will say so.
          }
        } else if (st.phase === 'ready' && f.kind === 'bye') {
          const id = st.sessionId as string;
          this.#authority.end(id);
          if (this.#dedup.closeSession(id)) this.#onSessionChange?.(id, 'closed');
          st.phase = 'done';
          await connection.close({ timeoutMs: 1000 }).catch(() => {});
          return;
        } else {
          drop(`control frame ${f.kind} in phase ${st.phase}`);
          return;
        }
      }
    } catch (err) {
      // Protocol error or idleness (a closed connection ends the loop too).
      const code = (err as { code?: string }).code;
      if (code === 'ERR_RPC_VERSION') refuse(err);
      else if (code === 'ERR_RPC_PROTOCOL') drop('malformed control frame');
      else if (code === 'ERR_MUX_DEADLINE') drop('peer idle');
    }
  }

  #ready(connection: Connection, st: ConnState, sessionId: string, epoch: number): void {
    st.sessionId = sessionId;
    st.epoch = epoch;
    st.phase = 'ready';
    this.#live.set(sessionId, connection);
  }

  #serveData(
    connection: Connection,
    ch: Channel,
    st: ConnState,
    replyMemory: ReplyMemory | undefined,
  ): void {
    const scope = {
      epoch: st.epoch,
      sessionId: st.sessionId as string,
      peer: st.peer,
      dedup: this.#dedup,
      ...(this.#onRecorded === undefined ? {} : { onRecorded: this.#onRecorded }),
      ...(replyMemory === undefined ? {} : { replyMemory }),
    };
    const slots = st.slots;
    const replies = new ReplyBatch(ch, slots);
    const registry = this.#registry;
    const limits = registry.limits;
    const fail = (err: unknown): void => {
      connection.destroy(err instanceof Error ? err : undefined);
    };
    // Requests run concurrently; each reply goes out when its handler settles — a
    // synchronous handler's at once, without a promise job.
    const dispatch = (msg: InboundMessage): void => {
      let parts: ReturnType<MethodRegistry['dispatchNow']>;
      try {
        parts = registry.dispatchNow(msg.bytes, scope);
      } catch (err) {
        replies.settle(msg);
        fail(err);
        return;
      }
      if (parts instanceof Promise) {
        parts.then(
          (p) => replies.add(p, msg),
          (err: unknown) => {
            replies.settle(msg);
            fail(err);
          },
        );
      } else replies.add(parts, msg);
    };
    // Requests that found every slot taken, in arrival order (held, not copied: each still
    // counts against the peer's window, so slow handlers backpressure the peer instead of
    // piling up here). Later arrivals queue behind them, so admission stays in order.
    const backlog: InboundMessage[] = [];
    // Slots closed with the connection refuse like full ones; the wait then says 'closed'.
    const tryTake = (): boolean => {
      try {
        return slots.tryTake();
      } catch {
        return false;
      }
    };
    let ended = false;
    let waiting = false;
    // At the bound, a call (and the calls behind it) waits until one finishes. Not a refusal:
    // a refused non-idempotent call would leave the client unsure whether to retry it; a
    // waiting one runs exactly once. It waits once, in line, for at most its own deadline
    // budget: past that its caller has given up, so it is dropped unexecuted.
    const admitBacklog = async (): Promise<void> => {
      waiting = true;
      try {
        while (backlog.length > 0 && !ended) {
          const msg = backlog[0] as InboundMessage;
          if (!tryTake()) {
            this.#stats.throttled++;
            const budget = requestBudgetMs(msg.bytes, limits);
            if (budget === 0) {
              // Not a request with a valid budget: treated as dispatch would, without a slot —
              // a malformed frame fails the connection (not counted as expired and dropped
              // quietly), a well-formed frame of another kind is dropped.
              backlog.shift();
              try {
                decodeRpcFrame(msg.bytes, limits);
              } catch (err) {
                msg.release();
                fail(err);
                return;
              }
              msg.release();
              continue;
            }
            const waited = await slots.take(budget);
            if (waited === 'closed') {
              // The connection went away while waiting: nothing here will be answered.
              ended = true;
              return;
            }
            if (waited === 'expired') {
              backlog.shift();
              msg.release();
              this.#stats.expired++;
              continue;
            }
            if (ended) {
              // Taken, but the channel closed meanwhile: its reply could not go out, and the
              // client replays the call on its next connection — running it here is waste.
              slots.give();
              return;
            }
          }
          backlog.shift();
          dispatch(msg);
        }
      } finally {
        waiting = false;
        if (ended) for (const m of backlog.splice(0)) m.release();
      }
    };
    // Not copied: the handler reads the transport's receive memory (registered memory on
    // RDMA). The message is released once the reply went out, which may alias it. Read by
    // `listen`: no receive promise or deadline timer per request.
    ch.listen(
      (msg) => {
        if (ended) {
          msg.release(); // the connection's slots are closed: it is going away
          return;
        }
        if (backlog.length === 0 && tryTake()) {
          dispatch(msg);
          return;
        }
        backlog.push(msg);
        if (!waiting) void admitBacklog();
      },
      () => {
        // Channel closed or connection lost: nothing left to answer.
        ended = true;
        if (!waiting) for (const m of backlog.splice(0)) m.release();
      },
    );
  }
}

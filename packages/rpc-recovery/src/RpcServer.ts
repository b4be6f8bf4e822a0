import { SharedBudget } from '@rdmajs/flowctl';
import type { Channel, Connection, InboundMessage } from '@rdmajs/mux';
import { DeduplicationTable } from './DeduplicationTable.js';
import { RpcError } from './errors.js';
import { RequestSlots } from './internal/RequestSlots.js';
import { checkFunction, checkInt } from './internal/validate.js';
import type { MethodRegistry } from './MethodRegistry.js';
import type { ReplyMemory } from './ReplyBuffer.js';
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
}

/** Upper limit of both concurrency options: far beyond any sane setting, inside flowctl's range. */
const MAX_CONCURRENT_REQUESTS = 1 << 24;

/** The remote host: what per-peer bounds count against (the port changes per connection). */
function peerOf(connection: Connection): string {
  const a = connection.remoteAddress;
  const colon = a.lastIndexOf(':');
  const host = colon > 0 ? a.slice(0, colon) : a;
  return host.length === 0 ? 'unknown' : host.slice(0, 256);
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
  readonly #stats = { opened: 0, resumed: 0, refused: 0, dropped: 0, throttled: 0 };
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
    this.#dedup = options.dedup ?? new DeduplicationTable();
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
  }

  get authority(): SessionAuthority {
    return this.#authority;
  }

  get dedup(): DeduplicationTable {
    return this.#dedup;
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
    const st: ConnState = {
      phase: 'hello',
      sessionId: undefined,
      lastEpoch: 0,
      challenge: undefined,
      epoch: 0,
      lastSeen: performance.now(),
      control: undefined,
      slots: new RequestSlots(this.#maxConcurrentRequests, this.#requestBudget),
    };
    this.#connections.add(connection);
    const drop = (why: string): void => {
      if (st.phase === 'done') return;
      this.#stats.dropped++;
      connection.destroy(new RpcError('ERR_RPC_PROTOCOL', why));
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
        void this.#serveData(connection, ch, st, replyMemory);
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
    const send = (f: SessionFrame): void => {
      ch.send(encodeSessionFrame(f)).catch(() => {});
    };
    const refuse = (err: unknown): void => {
      this.#stats.refused++;
      const code = (err as { code?: unknown }).code;
      send({
        kind: 'refused',
        code:
          typeof code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(code) ? code : 'ERR_RPC_AUTH',
        message: err instanceof Error ? (err.message.split('\n', 1)[0] ?? '') : 'refused',
      });
      st.phase = 'done';
      void connection.close({ timeoutMs: 1000 }).catch(() => {});
    };
    try {
      for (;;) {
        const msg = await ch.receive({ copy: true, timeoutMs: this.#idleTimeoutMs });
        let f: SessionFrame;
        try {
          f = decodeSessionFrame(msg.bytes);
        } finally {
          msg.release();
        }
        st.lastSeen = performance.now();
        if (st.phase === 'hello' && f.kind === 'open') {
          let issued: ReturnType<SessionAuthority['issue']>;
          try {
            issued = this.#authority.issue(peerOf(connection));
          } catch (err) {
            refuse(err);
            return;
          }
          this.#dedup.openSession(issued.sessionId);
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
            st.challenge = this.#authority.challenge(f.sessionId, peerOf(connection));
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
          send({ kind: 'pong', nonce: f.nonce });
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
      if ((err as { code?: string }).code === 'ERR_RPC_PROTOCOL') drop('malformed control frame');
      else if ((err as { code?: string }).code === 'ERR_MUX_DEADLINE') drop('peer idle');
    }
  }

  #ready(connection: Connection, st: ConnState, sessionId: string, epoch: number): void {
    st.sessionId = sessionId;
    st.epoch = epoch;
    st.phase = 'ready';
    this.#live.set(sessionId, connection);
  }

  async #serveData(
    connection: Connection,
    ch: Channel,
    st: ConnState,
    replyMemory: ReplyMemory | undefined,
  ): Promise<void> {
    const scope = {
      epoch: st.epoch,
      sessionId: st.sessionId as string,
      dedup: this.#dedup,
      ...(this.#onRecorded === undefined ? {} : { onRecorded: this.#onRecorded }),
      ...(replyMemory === undefined ? {} : { replyMemory }),
    };
    const slots = st.slots;
    for (;;) {
      let msg: InboundMessage;
      try {
        // Not copied: the handler reads the transport's receive memory (registered memory on
        // RDMA). The message is released once the reply went out, which may alias it; until
        // then it counts against the peer's window, so slow handlers backpressure the peer
        // instead of piling up copies here.
        msg = await ch.receive({ timeoutMs: 60_000 });
      } catch (err) {
        if ((err as { code?: string }).code === 'ERR_MUX_DEADLINE') continue; // just quiet
        return; // channel closed or connection lost: nothing left to answer
      }
      // At the bound, this call (and the channel behind it) waits until one finishes. Not a
      // refusal: a refused non-idempotent call would leave the client unsure whether to retry
      // it; a waiting one runs exactly once, and its deadline still bounds the caller.
      if (!slots.tryTake()) {
        this.#stats.throttled++;
        if (!(await slots.take())) {
          msg.release();
          return; // the connection went away while waiting
        }
      }
      const release = (): void => {
        msg.release();
        slots.give();
      };
      // Requests run concurrently; each reply goes out when its handler settles.
      this.#registry.dispatch(msg.bytes, scope).then(
        (parts) => {
          if (parts === undefined) release();
          // Reply blocks belong to the response: the transport releases them once sent.
          else ch.send(parts, { transfer: true }).then(release, release);
        },
        (err: unknown) => {
          release();
          connection.destroy(err instanceof Error ? err : undefined);
        },
      );
    }
  }
}

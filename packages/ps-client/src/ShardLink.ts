import type { Connection, MessagePart, SharedSecret } from '@rdmajs/mux';
import {
  type BackoffPolicy,
  ExponentialBackoff,
  RpcClient,
  type RpcReply,
} from '@rdmajs/rpc-recovery';
import type { LinkTransport, TransportPorts } from './ClientTransports.js';
import { PsClientError } from './errors.js';

export interface ShardAddress {
  host?: string;
  /** The port used for a transport that `ports` does not name. */
  port: number;
  /** Per transport, when the shard listens on several (e.g. `{ rdma: 7000, tcp: 7001 }`). */
  ports?: TransportPorts;
}

export interface ShardLinkOptions {
  transport: LinkTransport;
  secret: SharedSecret;
  address: ShardAddress;
  /** Label for errors and stats until the shard reports its id. */
  label: string;
  connectTimeoutMs: number;
  /** Budget for re-opening a session after the old one failed (e.g. the server restarted). */
  reconnectBudgetMs: number;
  /** Pushes sent and unanswered at once (order is kept; the rest wait their turn). */
  maxInFlightPushes: number;
  /** Pushes queued (sent or waiting) beyond which `push` refuses with ERR_PS_CLIENT_OVERLOADED. */
  maxQueuedPushes: number;
  /** Payload bytes queued beyond which `push` refuses the same way (kept until acknowledged, for resends). */
  maxQueuedPushBytes: number;
  heartbeatIntervalMs: number;
  heartbeatMisses: number;
  backoff?: () => BackoffPolicy;
  /** The first push seq (a shard seen before keeps its writer's seqs increasing). Default 1. */
  firstSeq?: number;
  /**
   * Registered bytes of timed-out pushes parked on the live session beyond which that session
   * is replaced (closing it frees them). Default DEFAULT_MAX_PARKED_PUSH_BYTES.
   */
  maxParkedPushBytes?: number;
}

/**
 * A quarter of PushBlocks' default pinned budget: an overloaded but healthy session cannot
 * hold the blocks of its timed-out pushes without bound (they would push every later push
 * to the heap); past this it is replaced, as a failed one is.
 */
export const DEFAULT_MAX_PARKED_PUSH_BYTES = 16 << 20;

export type ShardLinkState = 'connected' | 'relinking' | 'failed' | 'closed';

export interface ShardLinkStats {
  shard: string;
  state: ShardLinkState;
  queuedPushes: number;
  relinks: number;
  resent: number;
  rpcReconnects: number;
  /** The transport of the session's current connection (`'rdma'`, `'tcp'`), if connected. */
  transport: string | undefined;
  /** True while the session runs on the TCP fallback of `transport: 'auto'`. */
  onFallback: boolean;
  /** Connections made over the fallback, over this link's sessions. */
  fallbacks: number;
  /** Bytes of registered blocks of settled pushes waiting for their session to close. */
  parkedPushBytes: number;
}

interface QueuedPush {
  readonly seq: number;
  readonly method: string;
  /** Bytes, or a block of the RDMA transport's allocator (sent in place). */
  readonly payload: MessagePart;
  readonly length: number;
  readonly deadlineAt: number;
  /** The link generation it was last sent on (0: never sent). */
  sentGen: number;
  /** The first generation it was sent on (0: never sent). */
  firstGen: number;
  /** A generation whose session answered it (the server had every byte), 0 if none did. */
  answeredGen: number;
  /** Takes the payload back once no session can read it (see #freeWhenUnread). */
  readonly free: ((payload: MessagePart) => void) | undefined;
  resolve(reply: Uint8Array): void;
  reject(err: Error): void;
}

const codeOf = (err: unknown): string | undefined => {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
};
const remoteCodeOf = (err: unknown): string | undefined => {
  const c = (err as { remoteCode?: unknown } | null)?.remoteCode;
  return typeof c === 'string' ? c : undefined;
};

/**
 * Errors after which the session, not the request, is at fault: open a new session and
 * send again. A push keeps its (writer, seq), so the store answers a resend of one it
 * already applied as a duplicate, never applying it twice.
 */
function isLinkFailure(err: unknown): boolean {
  const code = codeOf(err);
  if (code === 'ERR_RPC_SESSION_FAILED' || code === 'ERR_RPC_CLOSED') return true;
  const remote = remoteCodeOf(err);
  return remote === 'ERR_PS_REQUEST_DRAINING';
}

/**
 * One shard: an RpcClient session, replaced when it fails for good (the server restarted
 * and forgot it, or stayed away past the RPC layer's backoff), and this shard's ordered
 * push stream. Pushes get consecutive seqs when queued and are sent — and, after a new
 * session, sent again — strictly in seq order, so the store (whose de-dup treats a seq at or
 * below the last applied one as a duplicate) applies each exactly once and in order.
 *
 * ```
 * connected ──session failed──► relinking ──new session──► connected (queued pushes resent in order)
 *     │                             └──budget spent──► failed (queued pushes: ERR_PS_CLIENT_UNAVAILABLE)
 *     │                                                  └──next call──► relinking (a new budget)
 *     └──close()──► closed
 * ```
 */
export class ShardLink {
  readonly #o: ShardLinkOptions;
  #client: RpcClient | undefined;
  #state: ShardLinkState = 'relinking';
  #gen = 0;
  #nextSeq = 1;
  readonly #queue = new Map<number, QueuedPush>();
  #inFlight = 0;
  #queuedBytes = 0;
  #relinking: Promise<void> | undefined;
  #waiters: { resolve(): void; reject(e: Error): void }[] = [];
  #idle: (() => void)[] = [];
  /**
   * Payloads of settled pushes that a session may still read (queued in its transport, or
   * posted), by the newest generation that holds them: freed once that session is closed.
   */
  readonly #parked = new Map<number, QueuedPush[]>();
  /** Every generation up to this one has its session closed. */
  #closedThrough = 0;
  /** Bytes in #parked, and those parked on the current generation (bounded: #park). */
  #parkedBytes = 0;
  #parkedLive = 0;
  /** The closes of replaced sessions, chained in generation order. */
  #closing: Promise<void> = Promise.resolve();
  #label: string;
  readonly #counts = { relinks: 0, resent: 0, rpcReconnects: 0, fallbacks: 0 };

  private constructor(o: ShardLinkOptions) {
    this.#o = o;
    this.#label = o.label;
    this.#nextSeq = o.firstSeq ?? 1;
  }

  static async open(o: ShardLinkOptions): Promise<ShardLink> {
    const link = new ShardLink(o);
    link.#client = await link.#connect();
    link.#gen = 1;
    link.#state = 'connected';
    return link;
  }

  get label(): string {
    return this.#label;
  }

  set label(v: string) {
    this.#label = v;
  }

  get state(): ShardLinkState {
    return this.#state;
  }

  /** The session's live connection while connected (one-sided reads go on it). */
  get connection(): Connection | undefined {
    return this.#state === 'connected' ? this.#client?.connection : undefined;
  }

  stats(): ShardLinkStats {
    const rpc = this.#client?.stats();
    return {
      shard: this.#label,
      state: this.#state,
      queuedPushes: this.#queue.size,
      relinks: this.#counts.relinks,
      resent: this.#counts.resent,
      rpcReconnects: this.#counts.rpcReconnects + (rpc?.reconnects ?? 0),
      transport: rpc?.transport,
      onFallback: rpc?.onFallback ?? false,
      fallbacks: this.#counts.fallbacks + (rpc?.fallbacks ?? 0),
      parkedPushBytes: this.#parkedBytes,
    };
  }

  #connect(): Promise<RpcClient> {
    const a = this.#o.address;
    const t = this.#o.transport;
    const portOf = (name: string): number =>
      (a.ports as Record<string, number | undefined> | undefined)?.[name] ?? a.port;
    return RpcClient.connect({
      transport: t.primary,
      ...(a.host === undefined ? {} : { host: a.host }),
      port: portOf(t.primaryName),
      ...(t.fallback === undefined
        ? {}
        : {
            fallback: {
              transport: t.fallback,
              port: portOf(t.fallback.name),
              probeIntervalMs: t.probeIntervalMs,
            },
          }),
      secret: this.#o.secret,
      connectTimeoutMs: this.#o.connectTimeoutMs,
      heartbeatIntervalMs: this.#o.heartbeatIntervalMs,
      heartbeatMisses: this.#o.heartbeatMisses,
      maxInFlightSequences: Math.max(this.#o.maxInFlightPushes, 1),
      ...(this.#o.backoff === undefined ? {} : { backoff: this.#o.backoff() }),
    });
  }

  #closedError(): PsClientError {
    return new PsClientError('ERR_PS_CLIENT_CLOSED', 'client closed', { shard: this.#label });
  }

  #unavailable(cause?: unknown): PsClientError {
    return new PsClientError('ERR_PS_CLIENT_UNAVAILABLE', `shard ${this.#label} is unavailable`, {
      cause,
      shard: this.#label,
      retryable: true,
    });
  }

  #deadline(method: string, push: boolean): PsClientError {
    return new PsClientError(
      'ERR_PS_CLIENT_DEADLINE',
      `${method} to shard ${this.#label} passed its deadline${push ? ' (it may have been applied)' : ''}`,
      { shard: this.#label },
    );
  }

  /** The server's refusal, typed. */
  #remote(err: unknown): Error {
    const remote = remoteCodeOf(err);
    if (remote !== undefined) {
      return new PsClientError('ERR_PS_CLIENT_REMOTE', (err as Error).message, {
        cause: err,
        remoteCode: remote,
        shard: this.#label,
      });
    }
    if (codeOf(err) === 'ERR_RPC_DEADLINE') return this.#deadline('call', false);
    return err instanceof Error ? err : new Error(String(err));
  }

  /** Waits until the link is connected (or the deadline passes, or it fails / closes). */
  #ready(deadlineAt: number): Promise<RpcClient> {
    if (this.#state === 'connected' && this.#client !== undefined)
      return Promise.resolve(this.#client);
    if (this.#state === 'closed') return Promise.reject(this.#closedError());
    if (this.#state === 'failed') this.#revive();
    return new Promise<RpcClient>((resolve, reject) => {
      const timer = setTimeout(
        () => {
          this.#waiters = this.#waiters.filter((w) => w !== waiter);
          reject(this.#deadline('call', false));
        },
        Math.max(0, deadlineAt - performance.now()),
      );
      const waiter = {
        resolve: () => {
          clearTimeout(timer);
          resolve(this.#client as RpcClient);
        },
        reject: (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.#waiters.push(waiter);
    });
  }

  /** An idempotent call, sent again on a new session if the old one fails. */
  call(method: string, payload: Uint8Array, deadlineMs: number): Promise<Uint8Array> {
    return this.#idempotent(method, deadlineMs, (c, o) => c.call(method, payload, o));
  }

  /**
   * As `call`, but the reply stays in the transport's receive memory (registered memory on
   * RDMA): release it when done. Held replies count against the shard's send window.
   */
  callView(method: string, payload: Uint8Array, deadlineMs: number): Promise<RpcReply> {
    const client = this.#client;
    // Connected (the usual case): the call goes out now, with no async step or closure of its
    // own; only a failure takes the general path (relink and send again within the deadline).
    if (this.#state === 'connected' && client !== undefined) {
      const deadlineAt = performance.now() + deadlineMs;
      const gen = this.#gen;
      try {
        return client
          .callView(method, payload, { idempotent: true, deadlineMs })
          .catch((err: unknown) => this.#retryView(err, gen, method, payload, deadlineAt));
      } catch (err) {
        // Refused before it was sent (bad arguments): rejected, as the general path does.
        try {
          return this.#retryView(err, gen, method, payload, deadlineAt);
        } catch (e) {
          return Promise.reject(e);
        }
      }
    }
    return this.#idempotent(method, deadlineMs, (c, o) => c.callView(method, payload, o));
  }

  /** After the first attempt of `callView` failed: as `#idempotent` would go on. */
  #retryView(
    err: unknown,
    gen: number,
    method: string,
    payload: Uint8Array,
    deadlineAt: number,
  ): Promise<RpcReply> {
    if (this.#state === 'closed') throw this.#closedError();
    if (!isLinkFailure(err)) throw this.#remote(err);
    this.#relink(gen);
    const left = Math.ceil(deadlineAt - performance.now());
    if (left <= 0) throw this.#deadline(method, false);
    return this.#idempotent(method, left, (c, o) => c.callView(method, payload, o));
  }

  async #idempotent<T>(
    method: string,
    deadlineMs: number,
    send: (client: RpcClient, o: { idempotent: true; deadlineMs: number }) => Promise<T>,
  ): Promise<T> {
    const deadlineAt = performance.now() + deadlineMs;
    for (;;) {
      const client = await this.#ready(deadlineAt);
      const gen = this.#gen;
      const left = Math.ceil(deadlineAt - performance.now());
      if (left <= 0) throw this.#deadline(method, false);
      try {
        return await send(client, { idempotent: true, deadlineMs: left });
      } catch (err) {
        if (this.#state === 'closed') throw this.#closedError();
        if (!isLinkFailure(err)) throw this.#remote(err);
        this.#relink(gen);
      }
    }
  }

  /** Whether a push of `bytes` would be queued now (checked for every shard before any is queued). */
  canQueue(bytes: number): boolean {
    return (
      this.#queue.size < this.#o.maxQueuedPushes &&
      (this.#queue.size === 0 || this.#queuedBytes + bytes <= this.#o.maxQueuedPushBytes)
    );
  }

  /** Allocates the next seq of this shard's push stream (call `push` with it in the same tick). */
  nextSeq(): number {
    return this.#nextSeq;
  }

  /**
   * Queues a non-idempotent call under `seq` (= `nextSeq()`, its payload encoded with it).
   * Resolves with the reply once the server acknowledged it (durable under its log policy).
   * `free` gets the payload back exactly once, when no session can read it any more: at
   * once if the push is refused here; else once it settled and every session it was sent
   * on either answered it or is closed (a push failed by its deadline may still be queued
   * in its session's transport: its payload waits for that session to close).
   */
  push<P extends MessagePart>(
    seq: number,
    method: string,
    payload: P,
    deadlineMs: number,
    free?: (payload: P) => void,
  ): Promise<Uint8Array> {
    const refuse = (err: Error): Promise<Uint8Array> => {
      free?.(payload); // never queued: nothing reads it
      return Promise.reject(err);
    };
    if (this.#state === 'closed') return refuse(this.#closedError());
    if (this.#state === 'failed') this.#revive();
    if (seq !== this.#nextSeq) {
      return refuse(new PsClientError('ERR_PS_CLIENT_INVALID_ARG', `push seq ${seq} out of order`));
    }
    const length = payload.length;
    if (
      this.#queue.size >= this.#o.maxQueuedPushes ||
      (this.#queue.size > 0 && this.#queuedBytes + length > this.#o.maxQueuedPushBytes)
    ) {
      return refuse(
        new PsClientError(
          'ERR_PS_CLIENT_OVERLOADED',
          `${this.#queue.size} pushes (${this.#queuedBytes} bytes) queued for shard ${this.#label}`,
          { retryable: true, shard: this.#label },
        ),
      );
    }
    this.#nextSeq++;
    return new Promise<Uint8Array>((resolve, reject) => {
      const entry: QueuedPush = {
        seq,
        method,
        payload,
        length,
        deadlineAt: performance.now() + deadlineMs,
        sentGen: 0,
        firstGen: 0,
        answeredGen: 0,
        free: free as ((payload: MessagePart) => void) | undefined,
        resolve: (r) => {
          this.#settle(entry);
          resolve(r);
        },
        reject: (e) => {
          this.#settle(entry);
          reject(e);
        },
      };
      this.#queue.set(seq, entry);
      this.#armDeadline(entry.deadlineAt);
      this.#queuedBytes += length;
      this.#pump();
    });
  }

  /** Resolves once no push is queued (a shard leaving the map is closed only then). */
  whenIdle(): Promise<void> {
    if (this.#queue.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  /**
   * One timer for every queued push's deadline, armed for the earliest (as RpcClient's: a
   * timer per push cost a setTimeout and a clearTimeout per push). Pushes answered before
   * it fires leave it armed: it then finds nothing due and re-arms for the earliest left.
   * Unreferenced while nothing is queued, as a per-push timer would be gone.
   */
  #timer: NodeJS.Timeout | undefined;
  #timerAt = 0;

  #armDeadline(deadlineAt: number): void {
    const t = this.#timer;
    if (t !== undefined && this.#timerAt <= deadlineAt) {
      if (!t.hasRef()) t.ref();
      return;
    }
    if (t !== undefined) clearTimeout(t);
    this.#timerAt = deadlineAt;
    this.#timer = setTimeout(
      this.#onDeadline,
      Math.max(0, Math.ceil(deadlineAt - performance.now())),
    );
  }

  readonly #onDeadline = (): void => {
    this.#timer = undefined;
    // libuv's clock is coarser than performance.now(): a timer may fire up to 1 ms early.
    const now = performance.now() + 1;
    let next = Number.POSITIVE_INFINITY;
    const due: QueuedPush[] = [];
    for (const e of this.#queue.values()) {
      if (e.deadlineAt <= now) due.push(e);
      else if (e.deadlineAt < next) next = e.deadlineAt;
    }
    if (next !== Number.POSITIVE_INFINITY) this.#armDeadline(next);
    for (const e of due) e.reject(this.#deadline(e.method, true));
  };

  /** Forgets a push that ended; false if it had ended already. */
  #settle(entry: QueuedPush): boolean {
    if (!this.#queue.delete(entry.seq)) return false;
    this.#queuedBytes -= entry.length;
    this.#freeWhenUnread(entry);
    if (this.#queue.size === 0) {
      this.#timer?.unref();
      for (const f of this.#idle.splice(0)) f();
    }
    if (entry.sentGen === this.#gen && entry.sentGen !== 0) this.#inFlight--;
    this.#pump();
    return true;
  }

  /**
   * Frees a settled push's payload now, or, when a session may still read it (one that did
   * not answer it may hold it queued in its transport, or posted; one that answered read all
   * of it), lets it go: heap bytes are left to the GC (never reused, so nothing can read
   * them changed), a registered block is parked until that session is closed.
   */
  #freeWhenUnread(entry: QueuedPush): void {
    if (entry.free === undefined) return;
    const hold = entry.answeredGen === entry.sentGen ? entry.sentGen - 1 : entry.sentGen;
    if (entry.firstGen === 0 || hold < entry.firstGen || hold <= this.#closedThrough) {
      entry.free(entry.payload);
      return;
    }
    if (entry.payload instanceof Uint8Array) return;
    const list = this.#parked.get(hold);
    if (list === undefined) this.#parked.set(hold, [entry]);
    else list.push(entry);
    const bytes = entry.length;
    this.#parkedBytes += bytes;
    if (hold !== this.#gen) return; // its session is being closed already
    this.#parkedLive += bytes;
    // A live session holding too many: replace it (its pending pushes are resent).
    if (this.#parkedLive > (this.#o.maxParkedPushBytes ?? DEFAULT_MAX_PARKED_PUSH_BYTES))
      this.#relink(this.#gen);
  }

  /** Closes generation `gen`'s session; then payloads parked on it and older ones are freed. */
  #retire(client: RpcClient, gen: number): Promise<void> {
    const closed = client.close().catch(() => {});
    this.#closing = Promise.all([this.#closing, closed]).then(() => {
      if (gen > this.#closedThrough) this.#closedThrough = gen;
      for (const [g, list] of this.#parked) {
        if (g > gen) continue;
        this.#parked.delete(g);
        for (const e of list) {
          this.#parkedBytes -= e.length;
          e.free?.(e.payload);
        }
      }
    });
    return this.#closing;
  }

  /** Sends queued pushes in seq order while the window has room. */
  #pump(): void {
    if (this.#state !== 'connected' || this.#client === undefined) return;
    const client = this.#client;
    const gen = this.#gen;
    for (const entry of this.#queue.values()) {
      if (this.#inFlight >= this.#o.maxInFlightPushes) return;
      if (entry.sentGen === gen) continue;
      const left = Math.ceil(entry.deadlineAt - performance.now());
      if (left <= 0) continue; // its timer fires now
      if (entry.sentGen !== 0) this.#counts.resent++;
      else entry.firstGen = gen;
      entry.sentGen = gen;
      this.#inFlight++;
      let call: Promise<Uint8Array>;
      try {
        call = client.call(entry.method, entry.payload, { deadlineMs: left });
      } catch (err) {
        entry.answeredGen = gen; // refused before it was sent: this session holds nothing
        entry.reject(this.#remote(err));
        continue;
      }
      call.then(
        (reply) => {
          entry.answeredGen = gen;
          entry.resolve(reply);
        },
        (err: unknown) => {
          if (entry.sentGen !== gen || !this.#queue.has(entry.seq)) return; // superseded or settled
          if (this.#state === 'closed') entry.reject(this.#closedError());
          else if (isLinkFailure(err)) this.#relink(gen);
          else if (codeOf(err) === 'ERR_RPC_DEADLINE')
            entry.reject(this.#deadline(entry.method, true));
          else {
            // The server refused it: it had every byte.
            if (remoteCodeOf(err) !== undefined) entry.answeredGen = gen;
            entry.reject(this.#remote(err));
          }
        },
      );
    }
  }

  /** A failed link is tried again when it is used again (a new reconnect budget). */
  #revive(): void {
    if (this.#state !== 'failed' || this.#relinking !== undefined) return;
    this.#state = 'relinking';
    this.#counts.relinks++;
    this.#relinking = this.#reopen().finally(() => {
      this.#relinking = undefined;
    });
  }

  /** Replaces a failed session (once per generation) and resends the queue in seq order. */
  #relink(gen: number): void {
    if (gen !== this.#gen || this.#relinking !== undefined || this.#state !== 'connected') return;
    this.#state = 'relinking';
    this.#counts.relinks++;
    const old = this.#client;
    this.#client = undefined;
    this.#parkedLive = 0; // parked on `gen`: freed once `old` is closed
    this.#counts.rpcReconnects += old?.stats().reconnects ?? 0;
    this.#counts.fallbacks += old?.stats().fallbacks ?? 0;
    // Its pending calls are superseded: their errors are ignored by generation.
    if (old !== undefined) void this.#retire(old, gen);
    this.#relinking = this.#reopen().finally(() => {
      this.#relinking = undefined;
    });
  }

  async #reopen(): Promise<void> {
    const until = performance.now() + this.#o.reconnectBudgetMs;
    const backoff = new ExponentialBackoff({
      baseMs: 50,
      capMs: 1000,
      deadlineMs: this.#o.reconnectBudgetMs,
    });
    let attempt = 0;
    let lastErr: unknown;
    while (this.#state === 'relinking' && performance.now() < until) {
      try {
        const client = await this.#connect();
        if (this.#state !== 'relinking') {
          await client.close();
          return;
        }
        this.#client = client;
        this.#gen++;
        this.#inFlight = 0;
        this.#state = 'connected';
        const waiters = this.#waiters;
        this.#waiters = [];
        for (const w of waiters) w.resolve();
        this.#pump();
        return;
      } catch (err) {
        lastErr = err;
        if (codeOf(err) === 'ERR_MUX_AUTH') break; // a wrong secret stays wrong
        const delay = backoff.nextDelay(
          ++attempt,
          this.#o.reconnectBudgetMs - (until - performance.now()),
          err,
        );
        if (delay === null) break;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    if (this.#state !== 'relinking') return;
    this.#state = 'failed';
    const err = this.#unavailable(lastErr);
    for (const w of this.#waiters.splice(0)) w.reject(err);
    for (const e of [...this.#queue.values()]) e.reject(err);
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    const err = this.#closedError();
    for (const w of this.#waiters.splice(0)) w.reject(err);
    for (const e of [...this.#queue.values()]) e.reject(err);
    for (const f of this.#idle.splice(0)) f();
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const c = this.#client;
    this.#client = undefined;
    // Every payload is freed before this resolves (the client closes its transport after).
    await (c === undefined ? this.#closing : this.#retire(c, this.#gen));
  }
}

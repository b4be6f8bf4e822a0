import { EventEmitter } from 'node:events';
import {
  type Channel,
  type Connection,
  type InboundMessage,
  type MessagePart,
  partBytes,
  type SharedSecret,
  type Transport,
} from '@rdmajs/mux';
import { type BackoffPolicy, ExponentialBackoff } from './BackoffPolicy.js';
import { CallSequencer } from './CallSequencer.js';
import { RemoteError, RpcError, type RpcErrorCode } from './errors.js';
import { checkInt } from './internal/validate.js';
import {
  decodeRpcFrame,
  encodeRequestHeader,
  type RpcFrameLimits,
  RpcStatus,
  rpcFrameLimits,
} from './RpcFrame.js';
import { RpcReply } from './RpcReply.js';
import { resumptionProof } from './SessionAuthority.js';
import {
  decodeSessionFrame,
  encodeSessionFrame,
  RPC_CONTROL_CHANNEL,
  RPC_DATA_CHANNEL,
  type SessionFrame,
} from './SessionFrame.js';
import { type SessionState, SessionStateMachine } from './SessionStateMachine.js';
import {
  type FallbackOptions,
  publishTransportChange,
  type ResolvedFallback,
  resolveFallback,
  type TransportChange,
} from './TransportFallback.js';

export interface CallOptions {
  /** Budget for the whole call, recovery included, ms. Default 30 000. */
  deadlineMs?: number;
  signal?: AbortSignal;
  /**
   * The method may run more than once: after a reconnection the call is simply sent again.
   * Otherwise it carries (session, sequence) and the server runs it at most once.
   */
  idempotent?: boolean;
}

export interface RpcClientOptions {
  transport: Transport;
  host?: string;
  port: number;
  secret: SharedSecret;
  /**
   * Budget of one connection attempt, session handshake included, ms (a fallback attempt
   * after a failed primary gets a budget of its own). Default 5 000.
   */
  connectTimeoutMs?: number;
  /** A ping goes out on the control channel this often, ms. Default 1 000. */
  heartbeatIntervalMs?: number;
  /** Intervals without an answer before the connection is presumed dead. Default 3. */
  heartbeatMisses?: number;
  /** Delays between reconnection attempts; null gives the session up. Default `new ExponentialBackoff()`. */
  backoff?: BackoffPolicy;
  /** Calls pending at once; more are refused with ERR_RPC_OVERLOADED. Default 65 536. */
  maxPendingCalls?: number;
  /** Unsettled non-idempotent calls at once (keep <= the server's per-session bound). Default 1024. */
  maxInFlightSequences?: number;
  limits?: Partial<RpcFrameLimits>;
  /** Per-connection fallback when the primary transport cannot set up (off when absent). */
  fallback?: FallbackOptions;
}

/** Typed events of the client (the session's own are on `client.session`). */
export interface RpcClientEvents {
  transport: [TransportChange];
}

export interface RpcClientStats {
  state: SessionState;
  sessionId: string | undefined;
  epoch: number;
  pending: number;
  /** Successful (re)connections after the first. */
  reconnects: number;
  /** Calls sent again on a new connection. */
  replayed: number;
  /** Replayed non-idempotent calls the server had already executed (answered from its table). */
  answeredFromTable: number;
  /** Replies dropped because their epoch is not the current one. */
  staleDropped: number;
  heartbeatTimeouts: number;
  /** Name of the current connection's transport (undefined while none). */
  transport: string | undefined;
  /** True while the current connection is on the fallback transport. */
  onFallback: boolean;
  /** Connections made on the fallback because the primary failed. */
  fallbacks: number;
  /** Probes of the primary while on the fallback, and those that failed. */
  probes: number;
  probeFailures: number;
  /** Moves from the fallback back to the primary after a probe connected. */
  switchedBack: number;
}

interface Call {
  readonly requestId: number;
  readonly method: string;
  /** The caller's bytes or block, kept (not copied) until the call settles, for replay. */
  readonly payload: MessagePart;
  readonly payloadLength: number;
  readonly idempotent: boolean;
  readonly seq: number;
  readonly deadlineAt: number;
  readonly deadlineMs: number;
  /** Epoch it was last sent in (0: not sent yet). */
  sentEpoch: number;
  /** The reply's message (released by the call, or handed to the caller) and payload view. */
  resolve(msg: InboundMessage, payload: Uint8Array): void;
  reject(err: Error): void;
}

/**
 * A pending call as an object with methods: no closures per call (the promise's executor
 * aside). Settles once; `ended` tells the client to forget it.
 */
class PendingCall implements Call {
  sentEpoch = 0;
  #done = false;
  #signal: AbortSignal | undefined;
  #onAbort: (() => void) | undefined;

  constructor(
    readonly ended: (call: PendingCall) => void,
    readonly requestId: number,
    readonly method: string,
    readonly payload: MessagePart,
    readonly payloadLength: number,
    readonly idempotent: boolean,
    readonly seq: number,
    readonly deadlineAt: number,
    readonly deadlineMs: number,
    readonly view: boolean,
    readonly resolveWith: (r: Uint8Array | RpcReply) => void,
    readonly rejectWith: (e: Error) => void,
  ) {}

  /** Aborted by `signal`: fails with ERR_RPC_ABORTED. */
  watch(signal: AbortSignal): void {
    this.#signal = signal;
    this.#onAbort = () => {
      this.reject(
        new RpcError('ERR_RPC_ABORTED', `call ${this.method} aborted`, { cause: signal.reason }),
      );
    };
    signal.addEventListener('abort', this.#onAbort, { once: true });
  }

  #finish(): boolean {
    if (this.#done) return false;
    this.#done = true;
    if (this.#onAbort !== undefined) this.#signal?.removeEventListener('abort', this.#onAbort);
    this.ended(this);
    return true;
  }

  resolve(msg: InboundMessage, bytes: Uint8Array): void {
    if (!this.#finish()) {
      msg.release();
      return;
    }
    if (this.view) this.resolveWith(new RpcReply(msg, bytes));
    else {
      this.resolveWith(Uint8Array.prototype.slice.call(bytes));
      msg.release();
    }
  }

  reject(err: Error): void {
    if (this.#finish()) this.rejectWith(err);
  }
}

interface Link {
  readonly conn: Connection;
  /** Made over the fallback transport. */
  readonly fallback: boolean;
  /** Why the primary was not used. */
  readonly fallbackReason: Error | undefined;
  readonly control: Channel;
  readonly data: Channel;
  readonly epoch: number;
  lost: (reason: Error) => void;
  readonly whenLost: Promise<Error>;
}

/** Session refusals that no retry can cure: the session fails. */
const FATAL: ReadonlySet<string> = new Set([
  'ERR_MUX_INVALID_ARG',
  'ERR_RPC_INVALID_ARG',
  'ERR_MUX_AUTH',
  'ERR_MUX_VERSION',
  'ERR_RPC_AUTH',
  'ERR_RPC_SESSION_UNKNOWN',
  'ERR_RPC_SESSION_EVICTED',
  'ERR_RPC_SESSION_EXPIRED',
  'ERR_RPC_INVALID_STATE',
  'ERR_RPC_PROTOCOL',
  'ERR_RPC_VERSION',
]);

const codeOf = (err: unknown): string | undefined => {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === 'string' ? c : undefined;
};

/**
 * Calls over a session that outlives its connections (any mux Transport). The client opens a
 * session at connect, then keeps it: heartbeats on the control channel detect a silent peer;
 * a lost connection moves the session to `recovering`, and it reconnects with backoff,
 * proves its token to resume under a new epoch, learns what the server executed, and
 * replays what is still pending. Replies of an old epoch are dropped. Every call ends by its
 * reply, its deadline, its signal, or the session failing or closing — never later.
 */
export class RpcClient extends EventEmitter<RpcClientEvents> {
  readonly #o: Required<Omit<RpcClientOptions, 'limits' | 'host' | 'fallback'>> & {
    host: string | undefined;
  };
  readonly #fallback: ResolvedFallback | undefined;
  /** A primary connection a probe made, for the next link to use. */
  #probed: Connection | undefined;
  #lastTransport: string | undefined;
  readonly #limits: RpcFrameLimits;
  readonly #machine = new SessionStateMachine();
  readonly #pending = new Map<number, Call>();
  readonly #sequencer: CallSequencer;
  #token: Uint8Array | undefined;
  #link: Link | undefined;
  #nextId = 1;
  #closing = false;
  #wake: (() => void) | undefined;
  readonly #ready: Promise<void>;
  readonly #counts = {
    reconnects: 0,
    replayed: 0,
    answeredFromTable: 0,
    heartbeatTimeouts: 0,
    fallbacks: 0,
    probes: 0,
    probeFailures: 0,
    switchedBack: 0,
  };

  /** Connects (see `ready`); prefer `RpcClient.connect`. */
  constructor(options: RpcClientOptions) {
    super();
    if (options === null || typeof options !== 'object' || options.transport === undefined) {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'RpcClient needs { transport, port, secret }');
    }
    this.#o = {
      transport: options.transport,
      host: options.host,
      port: options.port,
      secret: options.secret,
      connectTimeoutMs: checkInt('connectTimeoutMs', options.connectTimeoutMs ?? 5000, 1),
      heartbeatIntervalMs: checkInt('heartbeatIntervalMs', options.heartbeatIntervalMs ?? 1000, 1),
      heartbeatMisses: checkInt('heartbeatMisses', options.heartbeatMisses ?? 3, 1, 1000),
      backoff: options.backoff ?? new ExponentialBackoff(),
      maxPendingCalls: checkInt('maxPendingCalls', options.maxPendingCalls ?? 65_536, 1),
      maxInFlightSequences: options.maxInFlightSequences ?? 1024,
    };
    this.#limits = rpcFrameLimits(options.limits);
    this.#fallback = resolveFallback(options.fallback);
    this.#sequencer = new CallSequencer({ maxInFlight: this.#o.maxInFlightSequences });
    this.#ready = new Promise<void>((resolve, reject) => {
      this.#machine.once('state', (c) => {
        if (c.to === 'connected') resolve();
        else reject(c.reason ?? new RpcError('ERR_RPC_CLOSED', 'client closed'));
      });
    });
    this.#ready.catch(() => {});
    void this.#run();
  }

  /** A client whose session is open (rejects typed when the first connection cannot be made). */
  static async connect(options: RpcClientOptions): Promise<RpcClient> {
    const client = new RpcClient(options);
    try {
      await client.ready();
    } catch (err) {
      await client.close();
      throw err;
    }
    return client;
  }

  /** Resolves at the first connection; rejects when the session failed or closed before. */
  ready(): Promise<void> {
    return this.#ready;
  }

  /** The session: its state, epoch, id, typed events and `EpochFilter`. */
  get session(): SessionStateMachine {
    return this.#machine;
  }

  /** The current connection while the session is connected (e.g. for one-sided reads). */
  get connection(): Connection | undefined {
    return this.#machine.state === 'connected' ? this.#link?.conn : undefined;
  }

  stats(): RpcClientStats {
    return {
      state: this.#machine.state,
      sessionId: this.#machine.sessionId,
      epoch: this.#machine.epoch,
      pending: this.#pending.size,
      staleDropped: this.#machine.epochs.stats().stale + this.#machine.epochs.stats().future,
      transport: this.#link === undefined ? undefined : this.#lastTransport,
      onFallback: this.#link?.fallback ?? false,
      ...this.#counts,
    };
  }

  /**
   * Calls `method`. Rejects with ERR_RPC_DEADLINE, ERR_RPC_ABORTED, ERR_RPC_CLOSED,
   * ERR_RPC_SESSION_FAILED, ERR_RPC_OVERLOADED, ERR_RPC_DEDUP_SESSION_FULL or a RemoteError.
   * `payload` (bytes, or a block of the transport's allocator) is kept, not copied, for
   * replay: leave it unchanged until the call settles. On RDMA it is sent behind the call's
   * own header bytes, so mux copies the message into a send slot (eager) or into the
   * connection's own pool for the server to READ (rendezvous): mux gathers only messages made
   * of blocks alone. The reply is copied out of the receive buffer; `callView` hands out the
   * buffer itself.
   */
  call(method: string, payload: MessagePart, options: CallOptions = {}): Promise<Uint8Array> {
    return this.#start(method, payload, options, false) as Promise<Uint8Array>;
  }

  /**
   * As `call`, but the reply stays in the transport's receive memory (no copy): release the
   * `RpcReply` when done with it (`using reply = await client.callView(…)`).
   */
  callView(method: string, payload: MessagePart, options: CallOptions = {}): Promise<RpcReply> {
    return this.#start(method, payload, options, true) as Promise<RpcReply>;
  }

  #start(
    method: string,
    payload: MessagePart,
    options: CallOptions,
    view: boolean,
  ): Promise<Uint8Array | RpcReply> {
    const deadlineMs = options.deadlineMs ?? 30_000;
    if (
      !Number.isInteger(deadlineMs) ||
      deadlineMs <= 0 ||
      deadlineMs > this.#limits.maxDeadlineMs
    ) {
      throw new RpcError(
        'ERR_RPC_INVALID_ARG',
        'deadlineMs must be a positive integer within limits',
      );
    }
    let payloadLength: number;
    try {
      payloadLength = partBytes(payload).length;
    } catch (cause) {
      throw new RpcError('ERR_RPC_INVALID_ARG', 'payload must be a Uint8Array or a Block', {
        cause,
      });
    }
    const state = this.#machine.state;
    if (state === 'closed' || this.#closing) {
      return Promise.reject(new RpcError('ERR_RPC_CLOSED', 'client closed'));
    }
    if (state === 'failed') {
      return Promise.reject(
        new RpcError('ERR_RPC_SESSION_FAILED', 'session failed', {
          cause: this.#failure,
        }),
      );
    }
    if (this.#pending.size >= this.#o.maxPendingCalls) {
      return Promise.reject(
        new RpcError('ERR_RPC_OVERLOADED', `${this.#pending.size} calls pending`, {
          retryable: true,
        }),
      );
    }
    const idempotent = options.idempotent === true;
    if (!idempotent && !this.#sequencer.canSend) {
      return Promise.reject(
        new RpcError('ERR_RPC_DEDUP_SESSION_FULL', 'too many unsettled non-idempotent calls', {
          retryable: true,
        }),
      );
    }
    const signal = options.signal;
    if (signal?.aborted) {
      return Promise.reject(
        new RpcError('ERR_RPC_ABORTED', `call ${method} aborted`, { cause: signal.reason }),
      );
    }
    const requestId = this.#nextId;
    const link = this.#machine.state === 'connected' ? this.#link : undefined;
    const seq = idempotent ? 0 : this.#sequencer.next();
    // Validates the method name and sizes before anything is recorded; a call that goes out
    // at once sends this very header (one encode per call).
    let header: Uint8Array;
    try {
      header = encodeRequestHeader(
        {
          requestId,
          sessionSeq: seq,
          ackBelow: this.#sequencer.ackBelow,
          epoch: link?.epoch ?? 1,
          idempotent,
          deadlineMs,
          method,
          payloadLength,
        },
        this.#limits,
      );
    } catch (err) {
      // Never sent: the sequence is settled at once (the server only sees ackBelow pass it).
      if (!idempotent) this.#sequencer.settle(seq);
      throw err;
    }
    this.#nextId = this.#nextId >= 0xffff_ffff ? 1 : this.#nextId + 1;
    const deadlineAt = performance.now() + deadlineMs;
    let call: PendingCall | undefined;
    const promise = new Promise<Uint8Array | RpcReply>((resolve, reject) => {
      call = new PendingCall(
        this.#settled,
        requestId,
        method,
        payload,
        payloadLength,
        idempotent,
        seq,
        deadlineAt,
        deadlineMs,
        view,
        resolve,
        reject,
      );
    });
    const c = call as PendingCall;
    if (signal !== undefined) c.watch(signal);
    this.#pending.set(requestId, c);
    this.#armDeadline(deadlineAt);
    if (link !== undefined) this.#send(link, c, header);
    return promise;
  }

  /** A call ended (answered, failed or given up): never sent again, so its sequence is settled. */
  readonly #settled = (call: PendingCall): void => {
    this.#pending.delete(call.requestId);
    if (this.#pending.size === 0) this.#deadlines?.unref();
    if (!call.idempotent) this.#sequencer.settle(call.seq);
  };

  /**
   * One timer for every call's deadline, armed for the earliest (a timer per call cost a
   * setTimeout and a clearTimeout per call). Calls answered before it fires leave it armed:
   * it then finds nothing due and re-arms for the earliest left. Unreferenced while no call
   * is pending, as a per-call timer would be.
   */
  #deadlines: ReturnType<typeof setTimeout> | undefined;
  #deadlinesAt = 0;

  #armDeadline(deadlineAt: number): void {
    const t = this.#deadlines;
    if (t !== undefined && this.#deadlinesAt <= deadlineAt) {
      if (!t.hasRef()) t.ref();
      return;
    }
    if (t !== undefined) clearTimeout(t);
    this.#deadlinesAt = deadlineAt;
    this.#deadlines = setTimeout(
      this.#onDeadline,
      Math.max(0, Math.ceil(deadlineAt - performance.now())),
    );
  }

  readonly #onDeadline = (): void => {
    this.#deadlines = undefined;
    // libuv's clock is coarser than performance.now(): a timer may fire up to 1 ms early.
    const now = performance.now() + 1;
    let next = Number.POSITIVE_INFINITY;
    const due: Call[] = [];
    for (const call of this.#pending.values()) {
      if (call.deadlineAt <= now) due.push(call);
      else if (call.deadlineAt < next) next = call.deadlineAt;
    }
    if (next !== Number.POSITIVE_INFINITY) this.#armDeadline(next);
    for (const call of due) {
      call.reject(
        new RpcError(
          'ERR_RPC_DEADLINE',
          `call ${call.method} passed its ${call.deadlineMs} ms deadline (state ${this.#machine.state})`,
        ),
      );
    }
  };

  /** Ends the session (the server forgets it), fails pending calls with ERR_RPC_CLOSED. Idempotent. */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    this.#wake?.();
    this.#probed?.destroy();
    this.#probed = undefined;
    const link = this.#link;
    const err = new RpcError('ERR_RPC_CLOSED', 'client closed');
    for (const c of [...this.#pending.values()]) c.reject(err);
    this.#machine.close();
    clearTimeout(this.#deadlines);
    this.#deadlines = undefined;
    if (link !== undefined) {
      await link.control
        .send(encodeSessionFrame({ kind: 'bye' }), { timeoutMs: 1000 })
        .catch(() => {});
      link.lost(err);
      await link.conn.close({ timeoutMs: 1000 }).catch(() => {});
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #failure: Error | undefined;

  /** Sends `call` on `link` (with `header` when the call encoded it just now, at its start). */
  #send(link: Link, call: Call, encoded?: Uint8Array): void {
    const remaining = Math.ceil(call.deadlineAt - performance.now());
    if (remaining <= 0) return; // its deadline is about to end it
    call.sentEpoch = link.epoch;
    const header =
      encoded ??
      encodeRequestHeader(
        {
          requestId: call.requestId,
          sessionSeq: call.seq,
          ackBelow: this.#sequencer.ackBelow,
          epoch: link.epoch,
          idempotent: call.idempotent,
          deadlineMs: remaining,
          method: call.method,
          payloadLength: call.payloadLength,
        },
        this.#limits,
      );
    link.data.send([header, call.payload], { timeoutMs: remaining }).catch((err: unknown) => {
      const code = codeOf(err);
      // A message the transport can never carry fails now; a lost link replays it later.
      if (code === 'ERR_MUX_TOO_LARGE' || code === 'ERR_MUX_INVALID_ARG') {
        this.#pending
          .get(call.requestId)
          ?.reject(
            new RpcError('ERR_RPC_CLOSED', `call ${call.method} cannot be sent`, { cause: err }),
          );
      }
    });
  }

  /**
   * A message of a link's data channel. Not copied: an Ok reply goes to its call, any other
   * back at once. False when it was malformed (the link is lost).
   */
  #onReply(link: Link, msg: InboundMessage): boolean {
    let frame: ReturnType<typeof decodeRpcFrame>;
    try {
      frame = decodeRpcFrame(msg.bytes, this.#limits);
    } catch (err) {
      msg.release();
      link.lost(err as Error);
      return false;
    }
    if (frame.kind !== 'response') {
      msg.release();
      return true;
    }
    const h = frame.header;
    // Only the current epoch's replies reach calls; a dead link's late ones are dropped
    // (undefined also for a call that already ended).
    const call = this.#machine.epochs.accept(h.epoch) ? this.#pending.get(h.requestId) : undefined;
    if (call === undefined || h.status !== RpcStatus.Ok) msg.release();
    if (call === undefined) return true;
    if (h.status === RpcStatus.Ok) call.resolve(msg, frame.payload);
    else {
      const outcome =
        h.status === RpcStatus.Error
          ? 'error'
          : h.status === RpcStatus.Rejected
            ? 'rejected'
            : 'unknown';
      call.reject(new RemoteError(h.errorCode, h.errorMessage, outcome));
    }
    return true;
  }

  /** The session's life: connect, serve until the link is lost, reconnect with backoff. */
  async #run(): Promise<void> {
    let attempt = 0;
    let failedAt = performance.now();
    while (!this.#closing) {
      let link: Link;
      let welcome: Extract<SessionFrame, { kind: 'welcome' }>;
      try {
        [link, welcome] = await this.#establish();
      } catch (err) {
        if (this.#closing) return;
        if (FATAL.has(codeOf(err) ?? '')) {
          this.#fail(err as Error);
          return;
        }
        attempt++;
        const delay = this.#o.backoff.nextDelay(attempt, performance.now() - failedAt, err);
        if (delay === null) {
          this.#fail(
            new RpcError('ERR_RPC_SESSION_FAILED', `gave up after ${attempt} attempts`, {
              cause: err,
            }),
          );
          return;
        }
        await this.#sleep(delay);
        continue;
      }
      if (this.#closing) {
        link.conn.destroy();
        return;
      }
      if (this.#machine.state === 'recovering') this.#counts.reconnects++;
      attempt = 0;
      this.#link = link;
      this.#machine.connected(welcome.epoch, welcome.sessionId);
      this.#announceTransport(link);
      this.#recover(link, welcome);
      const stopProbe = this.#probeWhileOnFallback(link);
      const reason = await link.whenLost;
      stopProbe();
      this.#link = undefined;
      link.conn.destroy();
      if (this.#closing) return;
      if (codeOf(reason) === 'ERR_RPC_HEARTBEAT_TIMEOUT') this.#counts.heartbeatTimeouts++;
      failedAt = performance.now();
      this.#machine.lost(reason);
    }
  }

  /** What the server said it holds decides each pending call: replay, or fail it typed. */
  #recover(link: Link, w: Extract<SessionFrame, { kind: 'welcome' }>): void {
    const done = new Set(w.done);
    for (const call of [...this.#pending.values()].sort((a, b) => a.requestId - b.requestId)) {
      if (!call.idempotent && call.seq < w.floor) {
        // Below what the server remembers: it may have run, and cannot be asked again.
        call.reject(
          new RpcError(
            'ERR_RPC_DEDUP_EXPIRED',
            `call ${call.method} (sequence ${call.seq}) is no longer known to the server; it may have run`,
          ),
        );
        continue;
      }
      if (call.sentEpoch !== 0) this.#counts.replayed++;
      if (!call.idempotent && done.has(call.seq)) this.#counts.answeredFromTable++;
      this.#send(link, call);
    }
  }

  #fail(reason: Error): void {
    if (this.#machine.state === 'failed' || this.#machine.state === 'closed') return;
    this.#failure = reason;
    this.#machine.fail(reason);
    const err = new RpcError('ERR_RPC_SESSION_FAILED', `session failed: ${reason.message}`, {
      cause: reason,
    });
    for (const c of [...this.#pending.values()]) c.reject(err);
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done(): void {
        clearTimeout(t);
        resolve();
      }
      this.#wake = done;
    });
  }

  /** A mux connection on the primary, else (configured, and not a fatal refusal) the fallback. */
  async #connectTransport(): Promise<{
    conn: Connection;
    fallback: boolean;
    reason?: Error;
    /** When the attempt that made `conn` began: its budget runs from there. */
    startedAt: number;
  }> {
    const probed = this.#probed;
    this.#probed = undefined;
    if (probed !== undefined) {
      if (probed.state === 'open')
        return { conn: probed, fallback: false, startedAt: performance.now() };
      probed.destroy();
    }
    const o = this.#o;
    let startedAt = performance.now();
    try {
      const conn = await o.transport.connect({
        ...(o.host === undefined ? {} : { host: o.host }),
        port: o.port,
        secret: o.secret,
        timeoutMs: o.connectTimeoutMs,
      });
      return { conn, fallback: false, startedAt };
    } catch (err) {
      const fb = this.#fallback;
      // A wrong secret or version is no RDMA trouble: the fallback would be refused alike.
      if (fb === undefined || this.#closing || FATAL.has(codeOf(err) ?? '')) throw err;
      const host = fb.host ?? o.host;
      startedAt = performance.now(); // the fallback attempt has a budget of its own
      const conn = await fb.transport.connect({
        ...(host === undefined ? {} : { host }),
        port: fb.port ?? o.port,
        secret: o.secret,
        timeoutMs: o.connectTimeoutMs,
      });
      this.#counts.fallbacks++;
      return { conn, fallback: true, reason: err as Error, startedAt };
    }
  }

  /** Emits 'transport' (and publishes it) when the new link's transport differs from the last. */
  #announceTransport(link: Link): void {
    const name = link.fallback
      ? (this.#fallback as ResolvedFallback).transport.name
      : this.#o.transport.name;
    const previous = this.#lastTransport;
    const wasFallback = this.#lastFallback;
    this.#lastTransport = name;
    this.#lastFallback = link.fallback;
    if (previous !== undefined && wasFallback === link.fallback) return;
    if (wasFallback && !link.fallback) this.#counts.switchedBack++;
    const change: TransportChange = {
      sessionId: this.#machine.sessionId,
      from: previous,
      to: name,
      fallback: link.fallback,
      reason: link.fallbackReason,
      at: performance.now(),
    };
    publishTransportChange(change);
    this.emit('transport', change);
  }

  #lastFallback = false;

  /**
   * While `link` is on the fallback, tries the primary every probeIntervalMs (one probe at
   * a time); a probe that connects ends the link (ERR_RPC_TRANSPORT_SWITCH) and the session
   * resumes on the probed connection: pending calls replay there, de-duplicated as usual.
   */
  #probeWhileOnFallback(link: Link): () => void {
    const every = this.#fallback?.probeIntervalMs ?? 0;
    if (!link.fallback || every === 0) return () => {};
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const schedule = (): void => {
      timer = setTimeout(probe, every);
      timer.unref();
    };
    const probe = (): void => {
      if (stopped) return;
      this.#counts.probes++;
      const o = this.#o;
      o.transport
        .connect({
          ...(o.host === undefined ? {} : { host: o.host }),
          port: o.port,
          secret: o.secret,
          timeoutMs: o.connectTimeoutMs,
        })
        .then(
          (conn) => {
            if (stopped || this.#closing) {
              conn.destroy();
              return;
            }
            conn.on('error', () => {});
            this.#probed = conn;
            link.lost(
              new RpcError(
                'ERR_RPC_TRANSPORT_SWITCH',
                `the primary transport (${o.transport.name}) is reachable again`,
                { retryable: true },
              ),
            );
          },
          () => {
            this.#counts.probeFailures++;
            if (!stopped) schedule();
          },
        );
    };
    schedule();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }

  /** One connection attempt: mux connect, then open or resume the session on its control channel. */
  async #establish(): Promise<[Link, Extract<SessionFrame, { kind: 'welcome' }>]> {
    const { conn, fallback, reason, startedAt } = await this.#connectTransport();
    // One budget for the transport's connect and the session handshake after it.
    const until = startedAt + this.#o.connectTimeoutMs;
    const left = (): number => Math.max(1, Math.ceil(until - performance.now()));
    try {
      conn.on('error', () => {});
      const control = conn.openChannel(RPC_CONTROL_CHANNEL);
      const send = (f: SessionFrame): Promise<void> =>
        control.send(encodeSessionFrame(f), { timeoutMs: left() });
      const next = async (): Promise<SessionFrame> => {
        const m = await control.receive({ copy: true, timeoutMs: left() });
        try {
          const f = decodeSessionFrame(m.bytes);
          if (f.kind === 'refused') {
            throw new RpcError(f.code as RpcErrorCode, `server refused the session: ${f.message}`, {
              retryable: !FATAL.has(f.code),
            });
          }
          return f;
        } finally {
          m.release();
        }
      };
      const sessionId = this.#machine.sessionId;
      let f: SessionFrame;
      if (sessionId === undefined || this.#token === undefined) {
        await send({ kind: 'open' });
        f = await next();
      } else {
        await send({ kind: 'resume', sessionId, lastEpoch: this.#machine.epoch });
        const c = await next();
        if (c.kind !== 'challenge') throw this.#protocol(`expected a challenge, got ${c.kind}`);
        await send({
          kind: 'proof',
          proof: resumptionProof(this.#token, sessionId, c.challenge),
        });
        f = await next();
      }
      if (f.kind !== 'welcome') throw this.#protocol(`expected a welcome, got ${f.kind}`);
      if (sessionId === undefined) {
        if (f.token === undefined) throw this.#protocol('a new session without a token');
        this.#token = f.token;
      } else if (f.sessionId !== sessionId || f.token !== undefined) {
        throw this.#protocol('the welcome names another session');
      }
      if (f.epoch <= this.#machine.epoch) throw this.#protocol(`epoch ${f.epoch} is not new`);
      const data = conn.openChannel(RPC_DATA_CHANNEL);
      const link = this.#watch(conn, control, data, f.epoch, fallback, reason);
      return [link, f];
    } catch (err) {
      conn.destroy();
      throw err;
    }
  }

  #protocol(message: string): RpcError {
    return new RpcError('ERR_RPC_PROTOCOL', `session handshake: ${message}`);
  }

  /** Starts the link's readers and heartbeat; `whenLost` settles once, with the first fault. */
  #watch(
    conn: Connection,
    control: Channel,
    data: Channel,
    epoch: number,
    fallback: boolean,
    fallbackReason: Error | undefined,
  ): Link {
    let lost!: (reason: Error) => void;
    const whenLost = new Promise<Error>((resolve) => {
      lost = resolve;
    });
    let over = false;
    const link: Link = {
      conn,
      fallback,
      fallbackReason,
      control,
      data,
      epoch,
      whenLost,
      lost: (reason) => {
        if (over) return;
        over = true;
        clearInterval(beat);
        lost(reason);
      },
    };
    const closed = (err: Error | undefined): void =>
      link.lost(err ?? new RpcError('ERR_RPC_CLOSED', 'connection closed', { retryable: true }));
    conn.once('close', closed);
    if (conn.state === 'closed' || conn.state === 'failed') closed(conn.error);
    let lastHeard = performance.now();
    let nonce = 0;
    const interval = this.#o.heartbeatIntervalMs;
    const beat = setInterval(() => {
      const silent = performance.now() - lastHeard;
      if (silent > interval * this.#o.heartbeatMisses) {
        link.lost(
          new RpcError(
            'ERR_RPC_HEARTBEAT_TIMEOUT',
            `no heartbeat answer from ${conn.remoteAddress} for ${Math.round(silent)} ms`,
            { retryable: true },
          ),
        );
        return;
      }
      nonce = (nonce + 1) >>> 0;
      control
        .send(encodeSessionFrame({ kind: 'ping', nonce }), { timeoutMs: interval })
        .catch(() => {});
    }, interval);
    beat.unref();
    void (async () => {
      for (;;) {
        let f: SessionFrame;
        try {
          const m = await control.receive({ copy: true, timeoutMs: 60_000 });
          try {
            f = decodeSessionFrame(m.bytes);
          } finally {
            m.release();
          }
        } catch (err) {
          if (codeOf(err) === 'ERR_MUX_DEADLINE') continue;
          link.lost(err as Error);
          return;
        }
        if (f.kind !== 'pong') {
          link.lost(this.#protocol(`unexpected control frame ${f.kind}`));
          return;
        }
        lastHeard = performance.now();
      }
    })();
    // Replies are taken as they arrive (no promise or timer per reply); the data channel's
    // end (close or failure) loses the link.
    // A frame that fails the link stops the reading: what comes after it is released unread.
    let reading = true;
    data.listen((msg) => {
      if (reading) reading = this.#onReply(link, msg);
      else msg.release();
    }, link.lost);
    return link;
  }
}

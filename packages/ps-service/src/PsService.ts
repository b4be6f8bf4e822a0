import { randomBytes } from 'node:crypto';
import {
  type Connection,
  type Listener,
  RdmaConnection,
  RdmaTransport,
  type SharedSecret,
  type Transport,
} from '@rdmajs/mux';
import { MAX_BATCH_KEYS, ParameterStore, type PushLogOptions } from '@rdmajs/ps-server';
import {
  MAX_MESSAGE_BYTES,
  PsMethod,
  type PsWireLimits,
  psWireLimits,
  pullDenseReplyLength,
  resolveInit,
} from '@rdmajs/ps-wire';
import {
  type CallContext,
  MethodRegistry,
  ReplyBuffer,
  type ReplyMemory,
  RpcServer,
} from '@rdmajs/rpc-recovery';
import { PsServiceError } from './errors.js';
import { heapAllocator, heapReplyMemory } from './internal/heapMemory.js';
import { type Logger, silentLogger } from './Logger.js';
import { ReadableTables } from './ReadableTables.js';
import { type HandlerCounters, RequestHandlers, type ShardCatalog } from './RequestHandlers.js';
import type { ServiceTables } from './ServiceConfig.js';
import { type RequestOutcome, ServiceMetrics } from './ServiceMetrics.js';
import { type EtcdRegistrationOptions, ShardRegistration } from './ShardRegistration.js';
import { WriterBindings } from './WriterBindings.js';

/** One address the shard listens on, over one transport. */
export interface ListenSpec {
  transport: Transport;
  /** Default '127.0.0.1'. */
  host?: string;
  /** Default 0 (any free port: see `listeners`). */
  port?: number;
}

/** Where the shard listens, as it ended up (the ports chosen). */
export interface ListenerInfo {
  /** The transport's name (`'rdma'`, `'tcp'`). */
  readonly transport: string;
  readonly host: string;
  readonly port: number;
}

export interface PsServiceOptions {
  /**
   * One transport (with `host`, `port`), or give `listen` instead: several at once, each on
   * its own port (an RDMA listener's port is its TCP control port), and clients choose.
   */
  transport?: Transport;
  /** Default '127.0.0.1'. */
  host?: string;
  /** Default 0 (any free port: see `port`). */
  port?: number;
  /** Several listeners served by one store and one RPC server (sessions move between them). */
  listen?: readonly ListenSpec[];
  secret: SharedSecret;
  /** This shard's id (in table info and logs): 1–64 of [A-Za-z0-9_-]. */
  shardId: string;
  tables: ServiceTables;
  /** Data directory (snapshots + push log); without it the store is in memory only. */
  dir?: string;
  /** Snapshot every this many ms (needs `dir`). Default none. */
  snapshotIntervalMs?: number;
  /** Largest batch one request may carry. Default 65 536 (at most the store's 2^20). */
  maxBatchKeys?: number;
  /** Bounds the decoder enforces. Default `psWireLimits()`. */
  wireLimits?: Partial<PsWireLimits>;
  /** Longest wait for in-flight requests on close, ms. Default 10 000. */
  drainTimeoutMs?: number;
  logger?: Logger;
  /** Serve Prometheus metrics on `http://host:port/metrics` (host default '127.0.0.1'). */
  metrics?: { host?: string; port: number };
  /** Register in an etcd shard map (under a lease) once listening. */
  etcd?: EtcdRegistrationOptions;
  /**
   * Build replies to RDMA peers in the transport's registered memory and send them from
   * there (default true). `false` builds them on the heap, so the transport copies each into
   * a registered bounce buffer first: the zero-copy ablation of `pnpm bench`.
   */
  zeroCopyReplies?: boolean;
  /** Writer ids one RPC session may push under (see the README's "Writers"). Default 1. */
  maxWritersPerSession?: number;
  /** New writer ids one remote host may create while the store remembers them. Default 1024. */
  maxNewWritersPerPeer?: number;
}

export type PsServiceState = 'serving' | 'draining' | 'closed';

export interface PsServiceStats extends HandlerCounters {
  state: PsServiceState;
  connections: number;
  inFlight: number;
  snapshots: number;
  lsn: number;
}

/**
 * One parameter-server shard on the network: a ParameterStore served over an RpcServer on
 * any mux Transport. `ps.pull`, `ps.pullDense` and `ps.tableInfo` are idempotent (replayed
 * after a lost connection); `ps.push` and `ps.pushDense` are not: the RPC layer runs each
 * (session, sequence) at most once while the server lives, and the store's (writer, seq)
 * de-duplication — in its push log — keeps that across restarts. Sessions themselves do not
 * survive a restart (a fresh key per process): clients open new ones and resend.
 *
 * ```
 * serving ──close()──► draining (listener closed, in-flight requests finish, snapshot) ──► closed
 * ```
 */
export class PsService {
  readonly #o: PsServiceOptions;
  readonly #store: ParameterStore;
  readonly #handlers: RequestHandlers;
  readonly #rpc: RpcServer;
  readonly #listeners: readonly { transport: Transport; listener: Listener }[];
  readonly #connections = new Set<Connection>();
  readonly #inFlight: Set<Promise<unknown>>;
  readonly #metrics: ServiceMetrics;
  /** The metrics HTTP port, when metrics are served. */
  readonly metricsPort: number | undefined;
  readonly #log: Logger;
  #state: PsServiceState = 'serving';
  #timer: NodeJS.Timeout | undefined;
  #snapshotting: Promise<unknown> | undefined;
  #snapshots = 0;
  #snapshotLsn = -1;
  #closing: Promise<void> | undefined;
  #registration: ShardRegistration | undefined;
  /** Where replies to connections that are not RDMA (TCP) are built: reused heap blocks. */
  readonly #heapReplies = heapAllocator();
  readonly #heapReplyMemory = heapReplyMemory(this.#heapReplies);

  private constructor(
    o: PsServiceOptions,
    store: ParameterStore,
    handlers: RequestHandlers,
    rpc: RpcServer,
    listeners: readonly { transport: Transport; listener: Listener }[],
    inFlight: Set<Promise<unknown>>,
    metrics: ServiceMetrics,
    metricsPort: number | undefined,
  ) {
    this.#inFlight = inFlight;
    this.#metrics = metrics;
    this.metricsPort = metricsPort;
    this.#o = o;
    this.#store = store;
    this.#handlers = handlers;
    this.#rpc = rpc;
    this.#listeners = listeners;
    this.#log = o.logger ?? silentLogger;
  }

  /** Opens (and restores) the store, then listens. */
  static async start(options: PsServiceOptions): Promise<PsService> {
    const o = options;
    const log = o.logger ?? silentLogger;
    if (typeof o.shardId !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(o.shardId)) {
      throw new PsServiceError(
        'ERR_PS_SERVICE_CONFIG',
        'shardId must be 1–64 characters of [A-Za-z0-9_-]',
      );
    }
    const maxBatchKeys = o.maxBatchKeys ?? 65_536;
    if (!Number.isInteger(maxBatchKeys) || maxBatchKeys < 1 || maxBatchKeys > MAX_BATCH_KEYS) {
      throw new PsServiceError(
        'ERR_PS_SERVICE_CONFIG',
        `maxBatchKeys must be an integer in [1, ${MAX_BATCH_KEYS}]`,
      );
    }
    if (
      o.snapshotIntervalMs !== undefined &&
      (o.dir === undefined || !(o.snapshotIntervalMs >= 1))
    ) {
      throw new PsServiceError(
        'ERR_PS_SERVICE_CONFIG',
        'snapshotIntervalMs needs a dir and must be ≥ 1',
      );
    }
    if (o.zeroCopyReplies !== undefined && typeof o.zeroCopyReplies !== 'boolean') {
      throw new PsServiceError('ERR_PS_SERVICE_CONFIG', 'zeroCopyReplies must be a boolean');
    }
    const specs = listenSpecsOf(o);
    // The wire bound guards allocation; the batch bound below gives the caller its own code.
    const limits = psWireLimits(o.wireLimits);
    for (const d of o.tables.dense) {
      const n = d.shape.reduce((a, b) => a * b, 1);
      // A dense pull or push is one message: the tensor must fit in one, names and all.
      if (pullDenseReplyLength(n) + 512 > MAX_MESSAGE_BYTES) {
        throw new PsServiceError(
          'ERR_PS_SERVICE_CONFIG',
          `dense ${d.name}: ${n} elements do not fit in one ${MAX_MESSAGE_BYTES}-byte message`,
        );
      }
    }
    // Before the store: its readable tables take their regions from the RDMA transport.
    const readable = new ReadableTables(specs.map((s) => s.transport));
    const storeOptions = {
      tables: o.tables.tables,
      dense: o.tables.dense,
      memory: readable.memory,
    };
    const store =
      o.dir === undefined
        ? new ParameterStore(storeOptions)
        : await ParameterStore.open({
            ...storeOptions,
            dir: o.dir,
            ...(o.tables.log === undefined ? {} : { log: o.tables.log as PushLogOptions }),
          });
    for (const name of o.tables.unbounded ?? []) {
      log.log('warn', 'table unbounded', {
        shard: o.shardId,
        table: name,
        why: 'budgetBytes "unbounded": pushes of new keys grow it until memory runs out',
      });
    }
    if (o.dir !== undefined) {
      const r = store.restoreReport;
      log.log('info', 'store restored', {
        shard: o.shardId,
        dir: o.dir,
        snapshot: r?.snapshot ?? null,
        replayed: r?.replayed ?? 0,
        skipped: r?.skipped.length ?? 0,
        tornTail: r?.tornTail ?? null,
        lsn: store.lsn,
      });
    }
    const catalog: ShardCatalog = {
      shardId: o.shardId,
      maxBatchKeys,
      maxReplyBytes: MAX_MESSAGE_BYTES,
      tables: new Map(
        o.tables.tables.map((t) => [
          t.name,
          {
            dim: t.dim,
            nonFinite: o.tables.nonFinite.get(t.name) ?? 'reject',
            init: resolveInit(t.init),
          },
        ]),
      ),
      dense: new Map(
        o.tables.dense.map((d) => [
          d.name,
          {
            length: d.shape.reduce((a, b) => a * b, 1),
            nonFinite: o.tables.nonFinite.get(d.name) ?? 'reject',
          },
        ]),
      ),
    };
    const registry = new MethodRegistry();
    // Sessions are per process: the store's (writer, seq) carries exactly-once across restarts.
    const rpc = new RpcServer(registry, { key: randomBytes(32) });
    const writers = new WriterBindings(
      {
        ...(o.maxWritersPerSession === undefined
          ? {}
          : { maxWritersPerSession: o.maxWritersPerSession }),
        ...(o.maxNewWritersPerPeer === undefined
          ? {}
          : { maxNewWritersPerPeer: o.maxNewWritersPerPeer }),
      },
      (id) => rpc.isConnected(id) && rpc.dedup.hasSession(id),
      (writer) => store.sessionSeq(writer),
    );
    const handlers = new RequestHandlers(store, catalog, limits, writers);
    let service: PsService | undefined;
    const inFlight = new Set<Promise<unknown>>();
    const track = <T>(p: T | Promise<T>): T | Promise<T> => {
      if (!(p instanceof Promise)) return p;
      inFlight.add(p);
      const done = (): void => {
        inFlight.delete(p);
      };
      p.then(done, done);
      return p;
    };
    const metrics = new ServiceMetrics(
      { shard: o.shardId },
      {
        connections: () => service?.stats().connections ?? 0,
        inFlight: () => inFlight.size,
        sessionsResumed: () => rpc.stats().resumed,
        receiveQueueEmptied: () => receiveQueueEmptied(specs),
      },
    );
    const outcomeOf = (err: unknown): Exclude<RequestOutcome, 'ok'> => {
      const code = (err as { code?: unknown } | null)?.code;
      return typeof code === 'string' && /^ERR_PS_(REQUEST|WIRE)_/.test(code) ? 'refused' : 'error';
    };
    type Reply = Uint8Array | ReplyBuffer;
    type Handler = (p: Uint8Array, ctx: CallContext) => Reply | Promise<Reply>;
    // Per-request figures go to the method's tally (plain numbers); prom-client gets them on
    // scrape. No closure, label object or DataView per synchronous request.
    const serve = (method: string, fn: Handler, keysOf: (req: Uint8Array) => number): Handler => {
      const tally = metrics.tally(method);
      const isPush = method === PsMethod.push || method === PsMethod.pushDense;
      const answered = (reply: Reply, t0: number, size: number, keys: number): Reply => {
        const bytes = reply instanceof Uint8Array ? reply : reply.payload;
        tally.answered((performance.now() - t0) / 1000, size, bytes.length, keys);
        if (isPush && ((bytes[2] ?? 0) & 2) !== 0) metrics.countDuplicate();
        if (reply instanceof ReplyBuffer && reply.registered) metrics.countRegisteredReply();
        return reply;
      };
      const failed = (err: unknown): never => {
        tally.failed(outcomeOf(err));
        throw err;
      };
      return (payload, ctx) => {
        if (service !== undefined && service.#state !== 'serving') {
          tally.failed('refused');
          throw new PsServiceError('ERR_PS_REQUEST_DRAINING', 'shard is shutting down', {
            retryable: true,
          });
        }
        const t0 = performance.now();
        const size = payload.length;
        const keys = keysOf(payload); // read now: the payload view ends with the call
        let r: Reply | Promise<Reply>;
        try {
          r = fn(payload, ctx);
        } catch (err) {
          return failed(err);
        }
        return r instanceof Promise
          ? r.then((reply) => answered(reply, t0, size, keys), failed)
          : answered(r, t0, size, keys);
      };
    };
    // Key counts straight from the fixed part (offset 8, u32 little-endian) of pull and push requests.
    const countAt8 = (req: Uint8Array): number =>
      req.length >= 12
        ? ((req[8] as number) |
            ((req[9] as number) << 8) |
            ((req[10] as number) << 16) |
            ((req[11] as number) << 24)) >>>
          0
        : 0;
    const none = (): number => 0;
    registry.register(PsMethod.pull, serve(PsMethod.pull, handlers.pull, countAt8), {
      idempotent: true,
    });
    registry.register(PsMethod.pullDense, serve(PsMethod.pullDense, handlers.pullDense, none), {
      idempotent: true,
    });
    // Read descriptors only for a caller whose session runs on a connection that can READ them.
    const tableInfo: Handler = (p, ctx) =>
      handlers.tableInfo(
        p,
        readable.descriptorsFor(
          ctx.sessionId === undefined ? undefined : rpc.connectionOf(ctx.sessionId),
        ),
      );
    registry.register(PsMethod.tableInfo, serve(PsMethod.tableInfo, tableInfo, none), {
      idempotent: true,
    });
    registry.register(
      PsMethod.push,
      serve(PsMethod.push, (p, ctx) => track(handlers.push(p, ctx)), countAt8),
    );
    registry.register(
      PsMethod.pushDense,
      serve(PsMethod.pushDense, (p, ctx) => track(handlers.pushDense(p, ctx)), none),
    );
    const listeners: { transport: Transport; listener: Listener }[] = [];
    let metricsPort: number | undefined;
    try {
      for (const spec of specs) {
        const listener = await spec.transport.listen({
          ...(spec.host === undefined ? {} : { host: spec.host }),
          port: spec.port ?? 0,
          secret: o.secret,
        });
        listeners.push({ transport: spec.transport, listener });
      }
      if (o.metrics !== undefined)
        metricsPort = await metrics.serve(o.metrics.host ?? '127.0.0.1', o.metrics.port);
    } catch (err) {
      await Promise.allSettled(listeners.map((l) => l.listener.close()));
      await metrics.close();
      await store.close();
      throw err;
    }
    service = new PsService(o, store, handlers, rpc, listeners, inFlight, metrics, metricsPort);
    for (const l of listeners) service.#accept(l.listener, l.transport, readable);
    const first = (listeners[0] as { listener: Listener }).listener;
    if (o.etcd !== undefined) {
      try {
        service.#registration = await ShardRegistration.register(
          o.etcd,
          {
            id: o.shardId,
            host: first.host,
            port: first.port,
            ports: Object.fromEntries(service.listeners.map((l) => [l.transport, l.port])),
          },
          log,
        );
      } catch (err) {
        await service.close();
        throw err;
      }
    }
    log.log('info', 'serving', {
      shard: o.shardId,
      transport: service.listeners.map((l) => l.transport).join(','),
      host: first.host,
      port: first.port,
      listeners: service.listeners,
      tables: o.tables.tables.map((t) => ({
        name: t.name,
        dim: t.dim,
        optimizer: t.optimizer.kind,
      })),
      dense: o.tables.dense.map((d) => ({
        name: d.name,
        shape: d.shape,
        optimizer: d.optimizer.kind,
      })),
      dir: o.dir ?? null,
      metricsPort: metricsPort ?? null,
    });
    if (o.snapshotIntervalMs !== undefined) {
      service.#timer = setInterval(
        () => void service?.snapshot().catch(() => {}),
        o.snapshotIntervalMs,
      );
      service.#timer.unref();
    }
    return service;
  }

  #accept(listener: Listener, transport: Transport, readable: ReadableTables): void {
    listener.on('connection', (c) => {
      if (this.#state !== 'serving') {
        c.destroy();
        return;
      }
      readable.admit(c, transport);
      // Replies to an RDMA peer are built in that connection's own registered pool and go
      // out from there (eager SEND gather or rendezvous READ): remote-read, since a large one
      // is READ by the peer straight from its block, with a key that reaches this peer's
      // pool only (its own replies), never another client's.
      // With zeroCopyReplies off (an ablation) replies are built on the heap and copied.
      // Other transports (TCP) copy anyway: their replies are built in reused heap blocks,
      // not a fresh ArrayBuffer each (external memory that brings full GCs nearer).
      const replyMemory: ReplyMemory | undefined =
        c instanceof RdmaConnection
          ? this.#o.zeroCopyReplies !== false
            ? (n) => c.allocator.alloc(n, 'remote-read')
            : undefined
          : this.#heapReplyMemory;
      this.#connections.add(c);
      c.once('close', () => this.#connections.delete(c));
      this.#log.log('debug', 'connection', { shard: this.#o.shardId, peer: c.remoteAddress });
      this.#rpc.serve(c, replyMemory === undefined ? {} : { replyMemory });
    });
    listener.on('reject', (err, peer) => {
      this.#log.log('warn', 'handshake refused', { shard: this.#o.shardId, peer, error: err });
    });
    listener.on('error', (err) => {
      this.#log.log('error', 'listener error', { shard: this.#o.shardId, error: err });
    });
  }

  /** The first listener's host. */
  get host(): string {
    return (this.#listeners[0] as { listener: Listener }).listener.host;
  }

  /** The first listener's port. */
  get port(): number {
    return (this.#listeners[0] as { listener: Listener }).listener.port;
  }

  /** Every listener, in the order given: transport name, host, port. */
  get listeners(): readonly ListenerInfo[] {
    return this.#listeners.map(({ transport, listener }) => ({
      transport: transport.name,
      host: listener.host,
      port: listener.port,
    }));
  }

  /** The port of the listener over the transport named `name` (`'rdma'`, `'tcp'`), if any. */
  portOf(name: string): number | undefined {
    return this.#listeners.find((l) => l.transport.name === name)?.listener.port;
  }

  get state(): PsServiceState {
    return this.#state;
  }

  /** The Prometheus registry (also served over HTTP with the `metrics` option). */
  get metrics(): ServiceMetrics {
    return this.#metrics;
  }

  /** The store (for tests and in-process tools). */
  get store(): ParameterStore {
    return this.#store;
  }

  stats(): PsServiceStats {
    return {
      ...this.#handlers.counters,
      state: this.#state,
      connections: this.#connections.size,
      inFlight: this.#inFlight.size,
      snapshots: this.#snapshots,
      lsn: this.#store.lsn,
    };
  }

  /** A snapshot now (one at a time; a call while one runs shares it). Needs `dir`. */
  snapshot(): Promise<unknown> {
    if (this.#o.dir === undefined) return Promise.resolve(undefined);
    if (this.#snapshotting !== undefined) return this.#snapshotting;
    // Nothing pushed since the last one: the newest snapshot already holds this state.
    if (this.#snapshots > 0 && this.#store.lsn === this.#snapshotLsn)
      return Promise.resolve(undefined);
    const t0 = performance.now();
    const p = this.#store
      .snapshot()
      .then((info) => {
        this.#snapshots++;
        this.#metrics.snapshots.inc({ outcome: 'ok' });
        this.#snapshotLsn = info.lsn;
        this.#log.log('info', 'snapshot', {
          shard: this.#o.shardId,
          file: info.file,
          lsn: info.lsn,
          bytes: info.bytes,
          pauseMs: info.pauseMs,
          ms: Math.round(performance.now() - t0),
        });
        return info;
      })
      .catch((err: unknown) => {
        this.#metrics.snapshots.inc({ outcome: 'error' });
        this.#log.log('error', 'snapshot failed', { shard: this.#o.shardId, error: err });
        throw err;
      })
      .finally(() => {
        this.#snapshotting = undefined;
      });
    this.#snapshotting = p;
    return p;
  }

  /**
   * Stops accepting, lets in-flight requests finish (bounded by drainTimeoutMs), takes a
   * final snapshot (with a dir), closes the store and the connections. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    clearInterval(this.#timer);
    if (this.#registration !== undefined) {
      // Out of the shard map first; keep serving a moment so clients route elsewhere and
      // the pushes already on their way are answered rather than refused.
      await this.#registration.close();
      this.#log.log('info', 'left the shard map', { shard: this.#o.shardId });
      await new Promise((r) => setTimeout(r, this.#o.etcd?.leaveGraceMs ?? 1000));
    }
    this.#state = 'draining';
    this.#log.log('info', 'draining', { shard: this.#o.shardId, inFlight: this.#inFlight.size });
    await Promise.allSettled(this.#listeners.map((l) => l.listener.close()));
    const deadline = this.#o.drainTimeoutMs ?? 10_000;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.#inFlight]),
      new Promise((r) => {
        timer = setTimeout(r, deadline);
      }),
    ]);
    clearTimeout(timer);
    if (this.#o.dir !== undefined) await this.snapshot().catch(() => {});
    await this.#store.close().catch((err: unknown) => {
      this.#log.log('error', 'store close failed', { shard: this.#o.shardId, error: err });
    });
    await Promise.allSettled([...this.#connections].map((c) => c.close({ timeoutMs: 1000 })));
    this.#heapReplies.close();
    await this.#metrics.close();
    this.#state = 'closed';
    this.#log.log('info', 'closed', { shard: this.#o.shardId, lsn: this.#store.lsn });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** The listeners to open: `listen`, or the one of `transport` / `host` / `port`. */
function listenSpecsOf(o: PsServiceOptions): readonly ListenSpec[] {
  const one = o.transport !== undefined;
  if (one === (o.listen !== undefined)) {
    throw new PsServiceError('ERR_PS_SERVICE_CONFIG', 'give either transport or listen');
  }
  const specs: readonly ListenSpec[] = one
    ? [
        {
          transport: o.transport as Transport,
          ...(o.host === undefined ? {} : { host: o.host }),
          ...(o.port === undefined ? {} : { port: o.port }),
        },
      ]
    : (o.listen as readonly ListenSpec[]);
  if (!Array.isArray(specs) || specs.length === 0) {
    throw new PsServiceError('ERR_PS_SERVICE_CONFIG', 'listen must be a non-empty list');
  }
  const names = new Set<string>();
  for (const [i, s] of specs.entries()) {
    if (typeof s?.transport?.listen !== 'function' || typeof s.transport.name !== 'string') {
      throw new PsServiceError(
        'ERR_PS_SERVICE_CONFIG',
        `listen[${i}].transport is not a Transport`,
      );
    }
    if (names.has(s.transport.name)) {
      // Clients pick a listener by transport name: two of one name would be ambiguous.
      throw new PsServiceError(
        'ERR_PS_SERVICE_CONFIG',
        `listen[${i}]: a second ${s.transport.name} listener`,
      );
    }
    names.add(s.transport.name);
  }
  return specs;
}

/**
 * Times the shared receive queue of the shard's RDMA transports ran dry (mux's receive pool
 * `emptied`): with the `credits` ablation, when clients' SENDs were RNR-retried.
 */
function receiveQueueEmptied(specs: readonly ListenSpec[]): number {
  let n = 0;
  for (const s of specs) {
    if (s.transport instanceof RdmaTransport) n += s.transport.stats().receivePool?.emptied ?? 0;
  }
  return n;
}

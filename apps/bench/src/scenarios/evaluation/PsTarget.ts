import { RdmaTransport } from '@rdmajs/mux';
import { PS_CREDIT_FLUSH_MS, PsClient } from '@rdmajs/ps-client';
import type { SparseTableConfig } from '@rdmajs/ps-server';
import { type Device, openDevice } from '@rdmajs/verbs';
import { GrpcShardedStore } from '../../baselines/grpc/GrpcShardedStore.js';
import { TCP_BASELINE_OPTIONS } from '../../baselines/tcpFrames.js';
import type { Transport } from '../../report/Result.js';
import { numberKnob } from './envKnob.js';
import type { RdmaTuning } from './RdmaTuning.js';

/** The embedding table every evaluation scenario uses. */
export const EVAL_TABLE = 'emb';
export const EVAL_DIM = 64;
export const EVAL_SHARDS = 3;
export const EVAL_SECRET = 'rdmajs-bench-evaluation-secret-0123456789';
/** One row per key counting the pushes applied to it (sgd, lr 1, gradient −1: exact in f32). */
export const COUNTER_TABLE = 'applied';

/**
 * Bytes of a shard's embedding table: the key space (1 M) spread over the shards, with room
 * (index, seqlock metas, rows: ≈ 300 B a row): the table's memory is taken up front.
 */
export const EVAL_TABLE_BYTES = 160 * 1024 * 1024;
/**
 * `oneSidedRead`: RDMA clients READ rows straight from the shards' memory (the shard is not
 * woken); TCP clients pull two-sided as before. The gRPC baseline gets the table without it.
 */
export const EVAL_TABLES: SparseTableConfig[] = [
  {
    name: EVAL_TABLE,
    dim: EVAL_DIM,
    optimizer: { kind: 'sgd', lr: 0.01 },
    budgetBytes: EVAL_TABLE_BYTES,
    oneSidedRead: true,
  },
  { name: COUNTER_TABLE, dim: 1, optimizer: { kind: 'sgd', lr: 1 } },
];

/** The gRPC baseline's tables: the same, without one-sided reads (it has no RDMA). */
export const GRPC_TABLES: SparseTableConfig[] = EVAL_TABLES.map(({ oneSidedRead: _, ...t }) => t);

/** A shard's address, as `PsClient.connect` takes it. */
export interface ShardAddress {
  host: string;
  port: number;
  id: string;
}

/**
 * A parameter server's client side as the scenarios drive it: ours over one transport, or the
 * gRPC one. It lives in the process that makes the calls (a client process of the evaluation,
 * `client-process.ts`); the servers are someone else's.
 */
export interface PsTarget {
  readonly transport: Transport;
  /** What differs from the full system (an ablation), if anything: added to the rows' op. */
  readonly variant?: string | undefined;
  /** Rows of `keys` (keys.length × EVAL_DIM), checked for length and released. */
  pull(keys: BigUint64Array): Promise<void>;
  /** One push from logical client `writer` (one push at a time per writer). */
  push(keys: BigUint64Array, grads: Float32Array, writer: number): Promise<void>;
  close(): Promise<void>;
}

/** How an RDMA target differs from the full system (every lesson on): the ablations. */
export interface RdmaTargetOptions {
  /** RdmaTransport tuning of the client (the shards get theirs as CLI flags). */
  tuning?: RdmaTuning;
  /** Copy each pull's rows out of the transport's memory into a heap array (`pullInto`). */
  copyRows?: boolean;
  /** PsClients, each with its own connection (so QP, SRQ, receive buffers) per shard; writers are spread over them. Default 1. */
  clients?: number;
  /** One-sided fetches of readable tables (default on); off: two-sided pulls (an ablation). */
  oneSided?: boolean;
  /**
   * One-sided reads in flight per (shard, table) (PsClient `oneSidedReaders`); default
   * `BENCH_ONE_SIDED_READERS` if set, else PsClient's default.
   */
  oneSidedReaders?: number;
  /** Session recovery (default on). Off: no reconnect inside a session, no relink retries, no resend. */
  recovery?: boolean;
  /** What differs from the full system, for the rows' op. */
  variant?: string;
}

/**
 * `BENCH_ONE_SIDED_READERS=<n>`: PsClient `oneSidedReaders` of every RDMA target (client
 * processes inherit it), or undefined (PsClient's default). Not a positive integer: throws
 * (PsClient.connect refuses one above its bound).
 */
export const oneSidedReadersFromEnv = (value = process.env.BENCH_ONE_SIDED_READERS) =>
  numberKnob(
    'BENCH_ONE_SIDED_READERS',
    value,
    (n) => Number.isInteger(n) && n >= 1,
    'a positive integer',
  );

/**
 * `BENCH_ONE_SIDED_MAX_LOAD=<x>`: PsClient `oneSidedMaxLoad` of every RDMA target (client
 * processes inherit it; 1: no load gate), or undefined (PsClient's default). Not a number in
 * [0, 1]: throws.
 */
export const oneSidedMaxLoadFromEnv = (value = process.env.BENCH_ONE_SIDED_MAX_LOAD) =>
  numberKnob('BENCH_ONE_SIDED_MAX_LOAD', value, (x) => x >= 0 && x <= 1, 'a number in [0, 1]');

/**
 * `BENCH_ONE_SIDED_BUSY_MAX_KEYS=<n>`: PsClient `oneSidedBusyMaxKeys` of every RDMA target
 * (client processes inherit it; 0: the shut gate sends every segment two-sided), or undefined
 * (PsClient's default). Not an integer ≥ 0: throws (PsClient.connect refuses one above 1024).
 */
export const oneSidedBusyMaxKeysFromEnv = (value = process.env.BENCH_ONE_SIDED_BUSY_MAX_KEYS) =>
  numberKnob(
    'BENCH_ONE_SIDED_BUSY_MAX_KEYS',
    value,
    (n) => Number.isInteger(n) && n >= 0,
    'an integer ≥ 0',
  );

/** A reconnect policy that never retries: recovery off. */
const NO_RETRY = { nextDelay: () => null };
/** Clients connected at once (each opens a connection per shard). */
const CONNECT_AT_ONCE = 8;

/** Our parameter server on `servers` (a PsShardSet's), through PsClients on one transport. */
export class RdmajsPsTarget implements PsTarget {
  readonly #copies = new Map<number, Float32Array>();
  #next = 0;

  private constructor(
    readonly transport: Transport,
    readonly servers: readonly ShardAddress[],
    readonly clients: PsClient[],
    readonly options: RdmaTargetOptions,
    /** The client's RdmaTransport (RDMA only), shared by its PsClients and closed here. */
    readonly rdma: RdmaTransport | undefined,
    readonly device: Device | undefined,
  ) {}

  /** The first (usually the only) client. */
  get client(): PsClient {
    return this.clients[0] as PsClient;
  }

  get variant(): string | undefined {
    return this.options.variant;
  }

  static async connect(
    servers: readonly ShardAddress[],
    side: 'tcp' | 'rdma',
    provider: 'soft' | 'ibverbs',
    o: RdmaTargetOptions = {},
  ): Promise<RdmajsPsTarget> {
    const device = side === 'rdma' && provider !== 'soft' ? openDevice({ provider }) : undefined;
    const rdma =
      side === 'rdma'
        ? new RdmaTransport({
            // What PsClient gives the transports it makes itself (the shards' CLI too; the
            // TCP client's is PsClient's own, made with TCP_BASELINE_OPTIONS).
            creditFlushMs: PS_CREDIT_FLUSH_MS,
            ...(device === undefined ? {} : { device }),
            ...o.tuning,
          })
        : undefined;
    const readers = o.oneSidedReaders ?? oneSidedReadersFromEnv();
    const maxLoad = oneSidedMaxLoadFromEnv();
    const busyMaxKeys = oneSidedBusyMaxKeysFromEnv();
    const clients: PsClient[] = [];
    try {
      const n = o.clients ?? 1;
      while (clients.length < n) {
        const batch = Math.min(CONNECT_AT_ONCE, n - clients.length);
        clients.push(
          ...(await Promise.all(
            Array.from({ length: batch }, () =>
              PsClient.connect({
                servers: [...servers],
                transport: rdma ?? 'tcp',
                tcp: TCP_BASELINE_OPTIONS,
                secret: EVAL_SECRET,
                maxInFlightPushes: 64,
                ...(o.oneSided === false ? { oneSidedReads: false } : {}),
                ...(readers === undefined ? {} : { oneSidedReaders: readers }),
                ...(maxLoad === undefined ? {} : { oneSidedMaxLoad: maxLoad }),
                ...(busyMaxKeys === undefined ? {} : { oneSidedBusyMaxKeys: busyMaxKeys }),
                ...(o.recovery === false ? { backoff: () => NO_RETRY, reconnectBudgetMs: 1 } : {}),
              }),
            ),
          )),
        );
      }
    } catch (err) {
      await Promise.all(clients.map((c) => c.close()));
      rdma?.close();
      device?.close();
      throw err;
    }
    return new RdmajsPsTarget(side === 'tcp' ? 'tcp' : provider, servers, clients, o, rdma, device);
  }

  async pull(keys: BigUint64Array): Promise<void> {
    const client = this.clients[this.#next++ % this.clients.length] as PsClient;
    if (this.options.copyRows) {
      const n = keys.length * EVAL_DIM;
      let out = this.#copies.get(n);
      if (out === undefined) {
        out = new Float32Array(n);
        this.#copies.set(n, out);
      }
      await client.pullInto(EVAL_TABLE, keys, out);
      return;
    }
    const rows = await client.pull(EVAL_TABLE, keys);
    const n = rows.count;
    rows.release();
    if (n !== keys.length || rows.dim !== EVAL_DIM) throw new Error('ps pull: short reply');
  }

  async push(keys: BigUint64Array, grads: Float32Array, writer: number): Promise<void> {
    await (this.clients[writer % this.clients.length] as PsClient).push(EVAL_TABLE, keys, grads);
  }

  /** This side's registered memory (RDMA: the client transport's allocator). */
  registeredBytes(): number | undefined {
    return this.rdma?.allocator.registeredBytes;
  }

  /** Times this side's shared receive queue ran dry (RDMA: the transport's receive pool). */
  receiveQueueEmptied(): number | undefined {
    return this.rdma?.stats().receivePool?.emptied;
  }

  /** RC QPs this side holds: a connection per client and shard, `qpPoolSize` QPs each. */
  qps(): number | undefined {
    if (this.rdma === undefined) return undefined;
    return this.clients.length * this.servers.length * (this.options.tuning?.qpPoolSize ?? 1);
  }

  /** Closes the clients and their transport; the shard set is closed by whoever started it. */
  async close(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.close()));
    this.rdma?.close();
    this.device?.close();
  }
}

/** The same service on @grpc/grpc-js, what a Node user would pick today: its client side. */
export class GrpcPsTarget implements PsTarget {
  readonly transport = 'grpc' as const;

  private constructor(readonly store: GrpcShardedStore) {}

  /** Channels to the gRPC shards listening on `ports` (GrpcStoreServer processes). */
  static connect(ports: readonly number[]): GrpcPsTarget {
    return new GrpcPsTarget(GrpcShardedStore.connect(ports, GRPC_TABLES));
  }

  async pull(keys: BigUint64Array): Promise<void> {
    const rows = await this.store.pull(EVAL_TABLE, keys);
    if (rows.length !== keys.length * EVAL_DIM) throw new Error('grpc pull: short reply');
  }

  push(keys: BigUint64Array, grads: Float32Array, writer: number): Promise<void> {
    return this.store.push(EVAL_TABLE, keys, grads, writer);
  }

  async close(): Promise<void> {
    this.store.close();
  }
}

import { PsClient } from '@rdmajs/ps-client';
import type { SparseTableConfig } from '@rdmajs/ps-server';
import { openDevice } from '@rdmajs/verbs';
import { GrpcShardedStore } from '../../baselines/grpc/GrpcShardedStore.js';
import type { PsShardSet } from '../../peers/PsShardSet.js';
import type { Transport } from '../../report/Result.js';
import { cpuNowUs, procCpuUs, procRssBytes } from '../../stats/cpu.js';

/** The embedding table every evaluation scenario uses. */
export const EVAL_TABLE = 'emb';
export const EVAL_DIM = 64;
export const EVAL_SHARDS = 3;
export const EVAL_SECRET = 'rdmajs-bench-evaluation-secret-0123456789';
/** One row per key counting the pushes applied to it (sgd, lr 1, gradient −1: exact in f32). */
export const COUNTER_TABLE = 'applied';

export const EVAL_TABLES: SparseTableConfig[] = [
  { name: EVAL_TABLE, dim: EVAL_DIM, optimizer: { kind: 'sgd', lr: 0.01 } },
  { name: COUNTER_TABLE, dim: 1, optimizer: { kind: 'sgd', lr: 1 } },
];

/** A parameter server as the scenarios drive it: ours over one transport, or the gRPC one. */
export interface PsTarget {
  readonly transport: Transport;
  /** Rows of `keys` (keys.length × EVAL_DIM), checked for length and released. */
  pull(keys: BigUint64Array): Promise<void>;
  /** One push from logical client `writer` (one push at a time per writer). */
  push(keys: BigUint64Array, grads: Float32Array, writer: number): Promise<void>;
  /** CPU so far of every process involved (this one and each server), µs. */
  cpuUs(): number;
  /** Resident memory of every process involved, bytes. */
  rssBytes(): number;
  close(): Promise<void>;
}

function sumOver(pids: readonly number[], read: (pid: number) => number): number {
  let sum = 0;
  for (const pid of pids) {
    try {
      sum += read(pid);
    } catch {
      // a shard killed by the failure scenario has no /proc entry until it is restarted
    }
  }
  return sum;
}

/** Our parameter server on `set`'s shards, through one PsClient on one transport. */
export class RdmajsPsTarget implements PsTarget {
  private constructor(
    readonly transport: Transport,
    readonly set: PsShardSet,
    readonly client: PsClient,
  ) {}

  static async connect(
    set: PsShardSet,
    side: 'tcp' | 'rdma',
    provider: 'soft' | 'ibverbs',
  ): Promise<RdmajsPsTarget> {
    const client = await PsClient.connect({
      servers: set.servers(side),
      transport: side,
      ...(side === 'rdma' && provider !== 'soft'
        ? { rdma: { device: openDevice({ provider }) } }
        : {}),
      secret: EVAL_SECRET,
      maxInFlightPushes: 64,
    });
    return new RdmajsPsTarget(side === 'tcp' ? 'tcp' : provider, set, client);
  }

  async pull(keys: BigUint64Array): Promise<void> {
    const rows = await this.client.pull(EVAL_TABLE, keys);
    const n = rows.count;
    rows.release();
    if (n !== keys.length || rows.dim !== EVAL_DIM) throw new Error('ps pull: short reply');
  }

  async push(keys: BigUint64Array, grads: Float32Array): Promise<void> {
    await this.client.push(EVAL_TABLE, keys, grads);
  }

  cpuUs(): number {
    return cpuNowUs() + sumOver(this.set.pids, procCpuUs);
  }

  rssBytes(): number {
    return process.memoryUsage.rss() + sumOver(this.set.pids, procRssBytes);
  }

  /** Closes the client; the shard set is closed by whoever started it. */
  close(): Promise<void> {
    return this.client.close();
  }
}

/** The same service on @grpc/grpc-js: what a Node user would pick today. */
export class GrpcPsTarget implements PsTarget {
  readonly transport = 'grpc' as const;

  private constructor(readonly store: GrpcShardedStore) {}

  static async start(): Promise<GrpcPsTarget> {
    return new GrpcPsTarget(await GrpcShardedStore.start(EVAL_SHARDS, EVAL_TABLES));
  }

  async pull(keys: BigUint64Array): Promise<void> {
    const rows = await this.store.pull(EVAL_TABLE, keys);
    if (rows.length !== keys.length * EVAL_DIM) throw new Error('grpc pull: short reply');
  }

  push(keys: BigUint64Array, grads: Float32Array, writer: number): Promise<void> {
    return this.store.push(EVAL_TABLE, keys, grads, writer);
  }

  cpuUs(): number {
    return cpuNowUs() + sumOver(this.store.pids, procCpuUs);
  }

  rssBytes(): number {
    return process.memoryUsage.rss() + sumOver(this.store.pids, procRssBytes);
  }

  close(): Promise<void> {
    return this.store.close();
  }
}

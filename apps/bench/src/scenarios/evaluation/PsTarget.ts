import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PsClient } from '@rdmajs/ps-client';
import type { SparseTableConfig } from '@rdmajs/ps-server';
import { TcpTransport } from '@rdmajs/tcp';
import { GrpcShardedStore } from '../../baselines/grpc/GrpcShardedStore.js';
import type { Transport } from '../../report/Result.js';
import { cpuNowUs, procCpuUs, procRssBytes } from '../../stats/cpu.js';
import { PsShardProcess } from './PsShardProcess.js';

/** The embedding table every evaluation scenario uses. */
export const EVAL_TABLE = 'emb';
export const EVAL_DIM = 64;
export const EVAL_SHARDS = 3;
const SECRET = 'rdmajs-bench-evaluation-secret-0123456789';

/** A parameter server as the scenarios drive it: ours over one transport, or the gRPC one. */
export interface PsTarget {
  readonly transport: Transport;
  /** Rows of `keys` (keys.length × EVAL_DIM), checked for length. */
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

/** One row per key counting the pushes applied to it (sgd, lr 1, gradient −1: exact in f32). */
export const COUNTER_TABLE = 'applied';

const TABLES: SparseTableConfig[] = [
  { name: EVAL_TABLE, dim: EVAL_DIM, optimizer: { kind: 'sgd', lr: 0.01 } },
  { name: COUNTER_TABLE, dim: 1, optimizer: { kind: 'sgd', lr: 1 } },
];

/** Our parameter server: `EVAL_SHARDS` `rdmajs-ps-server` processes, `clients` PsClients. */
export class RdmajsPsTarget implements PsTarget {
  readonly #clients: PsClient[];

  private constructor(
    readonly transport: Transport,
    readonly shards: PsShardProcess[],
    clients: PsClient[],
    readonly work: string,
  ) {
    this.#clients = clients;
  }

  static async start(
    transport: 'tcp',
    options: { clients?: number; dataDir?: boolean } = {},
  ): Promise<RdmajsPsTarget> {
    const work = mkdtempSync(join(tmpdir(), 'rdmajs-bench-eval-'));
    const tablesFile = join(work, 'tables.json');
    const secretFile = join(work, 'secret');
    // Pushes are logged (group commit) only where a shard is killed and must keep them.
    const file = options.dataDir
      ? { tables: TABLES.map((t) => ({ ...t, log: true })), log: { policy: 'group' } }
      : { tables: TABLES.map((t) => ({ ...t, log: false })) };
    writeFileSync(tablesFile, JSON.stringify(file));
    writeFileSync(secretFile, SECRET, { mode: 0o600 });
    const shards = await Promise.all(
      Array.from({ length: EVAL_SHARDS }, (_, i) =>
        PsShardProcess.start({
          id: `e${i}`,
          tablesFile,
          secretFile,
          ...(options.dataDir ? { dataDir: join(work, `shard-${i}`) } : {}),
        }),
      ),
    );
    const clients: PsClient[] = [];
    try {
      for (let c = 0; c < (options.clients ?? 1); c++) {
        clients.push(
          await PsClient.connect({
            servers: shards.map((s) => ({ host: '127.0.0.1', port: s.port, id: s.options.id })),
            transport: new TcpTransport(),
            secret: SECRET,
            maxInFlightPushes: 64,
          }),
        );
      }
    } catch (err) {
      await Promise.all(clients.map((c) => c.close()));
      await Promise.all(shards.map((s) => s.stop()));
      rmSync(work, { recursive: true, force: true });
      throw err;
    }
    return new RdmajsPsTarget(transport, shards, clients, work);
  }

  get clients(): readonly PsClient[] {
    return this.#clients;
  }

  async pull(keys: BigUint64Array): Promise<void> {
    const rows = await (this.#clients[0] as PsClient).pull(EVAL_TABLE, keys);
    if (rows.length !== keys.length * EVAL_DIM) throw new Error('ps pull: short reply');
  }

  async push(keys: BigUint64Array, grads: Float32Array, writer: number): Promise<void> {
    const c = this.#clients[writer % this.#clients.length] as PsClient;
    await c.push(EVAL_TABLE, keys, grads);
  }

  cpuUs(): number {
    return cpuNowUs() + sumOver(this.#pids(), procCpuUs);
  }

  rssBytes(): number {
    return process.memoryUsage.rss() + sumOver(this.#pids(), procRssBytes);
  }

  /** Replaces shard `i` (after the failure scenario restarted it). */
  replaceShard(i: number, shard: PsShardProcess): void {
    this.shards[i] = shard;
  }

  async close(): Promise<void> {
    await Promise.all(this.#clients.map((c) => c.close()));
    await Promise.all(this.shards.map((s) => s.stop()));
    rmSync(this.work, { recursive: true, force: true });
  }

  #pids(): number[] {
    return this.shards.filter((s) => s.running).map((s) => s.pid);
  }
}

/** The same service on @grpc/grpc-js: what a Node user would pick today. */
export class GrpcPsTarget implements PsTarget {
  readonly transport = 'grpc' as const;

  private constructor(readonly store: GrpcShardedStore) {}

  static async start(): Promise<GrpcPsTarget> {
    return new GrpcPsTarget(await GrpcShardedStore.start(EVAL_SHARDS, TABLES));
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

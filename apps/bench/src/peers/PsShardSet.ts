import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SparseTableConfig } from '@rdmajs/ps-server';
import { TCP_BASELINE_SHARD_ARGS } from '../baselines/tcpFrames.js';
import type { ProcessGc } from '../stats/GcCounts.js';
import { PsShardProcess } from './PsShardProcess.js';

export interface PsShardSetOptions {
  shards: number;
  tables: readonly SparseTableConfig[];
  secret: string;
  /** Transports every shard listens on at once (`tcp`, `rdma`). */
  transports: readonly ('tcp' | 'rdma')[];
  provider: 'soft' | 'ibverbs';
  /** Give each shard a data directory and log pushes (group commit): needed to survive a kill. */
  durable?: boolean;
  /** Id prefix of the shards (`<prefix>0`, `<prefix>1`, …). */
  idPrefix?: string;
  /** Further CLI arguments for every shard. */
  args?: readonly string[];
}

/** The shard metric of mux's receive pool `emptied` (ps-service). */
const RECEIVE_QUEUE_EMPTIED = 'rdmajs_ps_rdma_receive_queue_emptied_total';

/**
 * `rdmajs-ps-server` shards listening on every transport at once, so the TCP and RDMA clients
 * of a scenario talk to the very same server processes.
 */
export class PsShardSet {
  private constructor(
    readonly shards: PsShardProcess[],
    readonly work: string,
  ) {}

  static async start(o: PsShardSetOptions): Promise<PsShardSet> {
    const work = mkdtempSync(join(tmpdir(), 'rdmajs-bench-eval-'));
    const tablesFile = join(work, 'tables.json');
    const secretFile = join(work, 'secret');
    // Pushes are logged (group commit) only where a shard is killed and must keep them.
    const file = o.durable
      ? { tables: o.tables.map((t) => ({ ...t, log: true })), log: { policy: 'group' } }
      : { tables: o.tables.map((t) => ({ ...t, log: false })) };
    writeFileSync(tablesFile, JSON.stringify(file));
    writeFileSync(secretFile, o.secret, { mode: 0o600 });
    const args = [
      '--transport',
      o.transports.join(','),
      '--rdma-provider',
      o.provider,
      ...TCP_BASELINE_SHARD_ARGS,
      // Read for the shards' transport counters (RECEIVE_QUEUE_EMPTIED); port 0: any free one.
      '--metrics',
      '127.0.0.1:0',
      ...(o.args ?? []),
    ];
    const started = await Promise.allSettled(
      Array.from({ length: o.shards }, (_, i) =>
        PsShardProcess.start({
          id: `${o.idPrefix ?? 'e'}${i}`,
          tablesFile,
          secretFile,
          listen: o.transports.map(() => 0),
          args,
          ...(o.durable ? { dataDir: join(work, `shard-${i}`) } : {}),
        }),
      ),
    );
    const shards = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) {
      await Promise.all(shards.map((s) => s.stop()));
      rmSync(work, { recursive: true, force: true });
      throw (failed as PromiseRejectedResult).reason;
    }
    return new PsShardSet(shards, work);
  }

  /** The static shard list for a PsClient on `transport`. */
  servers(transport: 'tcp' | 'rdma'): { host: string; port: number; id: string }[] {
    return this.shards.map((s) => ({
      host: '127.0.0.1',
      port: s.ports[transport] as number,
      id: s.options.id,
    }));
  }

  /** Server processes now running (a killed shard has none until it is restarted). */
  get pids(): number[] {
    return this.shards.filter((s) => s.running).map((s) => s.pid);
  }

  /** Every running shard's GCs since it started (a shard that does not answer is left out). */
  async gcCounts(): Promise<ProcessGc[]> {
    const read = await Promise.all(this.shards.map(async (s) => ({ s, gc: await s.gcCounts() })));
    return read.flatMap(({ s, gc }) =>
      gc === undefined ? [] : [{ process: `shard ${s.options.id}`, pid: s.pid, ...gc }],
    );
  }

  /**
   * Times the shards' RDMA shared receive queues ran dry so far, summed (with credits off:
   * clients' SENDs were RNR-retried then); undefined when a running shard does not tell.
   */
  async receiveQueueEmptied(): Promise<number | undefined> {
    const read = await Promise.all(this.shards.map((s) => s.metric(RECEIVE_QUEUE_EMPTIED)));
    return read.includes(undefined) ? undefined : read.reduce((a = 0, b = 0) => a + b, 0);
  }

  /** SIGKILL shard `i`, then start it again on the same ports and data directory. */
  async killAndRestart(i: number): Promise<void> {
    const shard = this.shards[i];
    if (shard === undefined) throw new Error(`no shard ${i}`);
    await shard.kill();
    this.shards[i] = await shard.restart();
  }

  async stop(): Promise<void> {
    await Promise.all(this.shards.map((s) => s.stop()));
    rmSync(this.work, { recursive: true, force: true });
  }
}

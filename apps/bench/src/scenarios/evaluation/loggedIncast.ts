import { PsShardSet } from '../../peers/PsShardSet.js';
import type { Result } from '../../report/Result.js';
import { type ClientPools, ClientProcess } from './ClientProcess.js';
import { EVAL_SECRET, EVAL_SHARDS, EVAL_TABLES } from './PsTarget.js';
import type { RdmaTuning } from './RdmaTuning.js';
import { HEADLINE_CONCURRENCY, runTraining, type TrainingOptions } from './training.js';

/** The variant of the incast rows whose shards log every push. */
export const LOGGED = 'logged';

/**
 * The headline incast again on shards with a data directory, as a production shard runs:
 * every push is written to the push log (group commit, fsync) before it is acknowledged. The
 * main rows' shards keep no log (nothing of theirs must survive), so they measure the
 * transport alone; these rows (`push-incast×64 logged`, compared TCP to RDMA among
 * themselves) show what the log adds. The shards and client processes are their own.
 */
export async function runLoggedIncast(
  o: {
    sides: readonly ('tcp' | 'rdma')[];
    provider: 'soft' | 'ibverbs';
    tuning: RdmaTuning;
    shardArgs: readonly string[];
    pools: ClientPools;
    training: TrainingOptions;
  },
  progress: (label: string) => void,
): Promise<Result[]> {
  if (o.sides.length === 0) return [];
  progress(`incast with a push log: starting shards (${o.sides.join(', ')})`);
  const set = await PsShardSet.start({
    shards: EVAL_SHARDS,
    tables: EVAL_TABLES,
    secret: EVAL_SECRET,
    transports: o.sides,
    provider: o.provider,
    durable: true,
    idPrefix: 'log',
    args: o.shardArgs,
  });
  const targets: ClientProcess[] = [];
  try {
    for (const side of o.sides)
      targets.push(
        await ClientProcess.spawn(
          {
            kind: 'rdmajs',
            side,
            provider: o.provider,
            servers: set.servers(side),
            options: { tuning: o.tuning },
          },
          {
            transport: side === 'tcp' ? 'tcp' : o.provider,
            variant: LOGGED,
            serverPids: () => set.pids,
            serverGc: () => set.gcCounts(),
            pools: o.pools,
          },
        ),
      );
    const rows = await runTraining(
      targets,
      { ...o.training, concurrency: [HEADLINE_CONCURRENCY] },
      progress,
    );
    // Compared with TCP's logged row, not the unlogged one.
    return rows.map((r) => ({ ...r, baselineOp: r.op, pushLog: 'group' }));
  } finally {
    await Promise.all(targets.map((t) => t.close()));
    await set.stop();
  }
}

import { PsShardSet } from '../../peers/PsShardSet.js';
import type { Result } from '../../report/Result.js';
import {
  type Ablation,
  ablatedServerArgs,
  ablatedTarget,
  compareWithReference,
} from './ablations.js';
import { type ClientPools, ClientProcess } from './ClientProcess.js';
import type { Capacity } from './capacity.js';
import { type FailureOptions, runFailure } from './failure.js';
import {
  type FetchRowPlan,
  type FetchWorkload,
  fetchOp,
  HEADLINE_LOAD,
  measureCapacities,
  measureFetchRows,
  warmUpFetch,
} from './inference.js';
import {
  EVAL_SECRET,
  EVAL_SHARDS,
  EVAL_TABLES,
  RdmajsPsTarget,
  type RdmaTargetOptions,
} from './PsTarget.js';
import { type RdmaTuning, serverArgsOf } from './RdmaTuning.js';
import { HEADLINE_CONCURRENCY, runTraining, type TrainingOptions } from './training.js';

/** What the fetch and incast ablations run against: the main shards and RDMA target. */
export interface LiveAblationContext {
  set: PsShardSet;
  /** The full system's RDMA client process on `set`. */
  full: ClientProcess;
  provider: 'soft' | 'ibverbs';
  tuning: RdmaTuning;
  workload: FetchWorkload;
  /** The request pools of every client process. */
  pools: ClientPools;
  /** The headline load's offered rate (requests per second, of TCP's capacity). */
  fetchRate: number;
  fetchMs: number;
  /** Each closed-loop capacity probe, ms (the main targets'). */
  probeMs: number;
  training: TrainingOptions;
}

const REF = 'ref';

/**
 * The rate a fetch ablation and its reference run at: the headline rate (HEADLINE_LOAD of
 * TCP's capacity, what the full system's rows ran at) when the ablated target can serve it,
 * else HEADLINE_LOAD of the ablated target's own closed-loop capacity — both rows at the lower
 * rate, so the ablated row measures the lesson, not a queue (offered the headline rate, the
 * bounce-copy target once completed 9.4 req/s and its latency was its backlog).
 */
export function ablationFetchRate(
  headlineRps: number,
  ablatedCapacityRps: number,
): { rate: number; basis: 'tcp-capacity' | 'ablated-capacity' } {
  const servable = Math.max(1, Math.round(HEADLINE_LOAD * ablatedCapacityRps));
  return servable < headlineRps
    ? { rate: servable, basis: 'ablated-capacity' }
    : { rate: headlineRps, basis: 'tcp-capacity' };
}

/** Side facts of an RDMA target for its row: QPs and registered memory of this side. */
async function footprint(t: ClientProcess): Promise<Record<string, number>> {
  const { qps, registeredBytes } = await t.info();
  return {
    ...(qps === undefined ? {} : { qps }),
    ...(registeredBytes === undefined ? {} : { registeredBytes }),
  };
}

/** How often a target's receive queues ran dry so far: its client's, its shards' (if its own). */
interface QueueCounts {
  client: number | undefined;
  shards: number | undefined;
}

async function queueCounts(t: ClientProcess, shards: PsShardSet | undefined): Promise<QueueCounts> {
  const [info, s] = await Promise.all([t.info(), shards?.receiveQueueEmptied()]);
  return { client: info.receiveQueueEmptied, shards: s };
}

/**
 * The row's receive-queue counts over its measurement: each time a queue ran dry a SEND
 * arriving found no buffer — with credits on none arrives then, with credits off it is
 * RNR-NAKed and retried (verbs counts no NAKs; this is what mux sees).
 */
function queueDelta(
  before: QueueCounts | undefined,
  after: QueueCounts | undefined,
): Record<string, number> {
  const out: Record<string, number> = {};
  if (before?.client !== undefined && after?.client !== undefined)
    out.clientQueueEmptied = after.client - before.client;
  if (before?.shards !== undefined && after?.shards !== undefined)
    out.shardQueueEmptied = after.shards - before.shards;
  return out;
}

/**
 * A fetch or incast ablation: the ablated target (on its own shards when the servers differ)
 * and the full system measured back to back with the same workload, so both meet the same
 * machine load; the ablated row carries its ratios against that reference row. The full
 * system is the main target, or for an incast on shards of its own a twin started alike.
 */
export async function runLiveAblation(
  a: Ablation,
  c: LiveAblationContext,
  progress: (label: string) => void,
): Promise<Result[]> {
  let own: PsShardSet | undefined;
  let twin: PsShardSet | undefined;
  let t: ClientProcess | undefined;
  let twinClient: ClientProcess | undefined;
  const startShards = (args: string[]) =>
    PsShardSet.start({
      shards: EVAL_SHARDS,
      tables: EVAL_TABLES,
      secret: EVAL_SECRET,
      transports: ['rdma'],
      provider: c.provider,
      args,
    });
  const spawn = (shards: PsShardSet, options: RdmaTargetOptions) =>
    ClientProcess.spawn(
      {
        kind: 'rdmajs',
        side: 'rdma',
        provider: c.provider,
        servers: shards.servers('rdma'),
        options,
      },
      {
        transport: c.provider,
        variant: options.variant,
        serverPids: () => shards.pids,
        serverGc: () => shards.gcCounts(),
        pools: c.pools,
      },
    );
  try {
    if (a.serverArgs !== undefined) {
      const args = ablatedServerArgs(a, c.tuning);
      // An incast on fresh shards against the main ones measured their cold start (new rows
      // inserted, JIT, receive pools growing): −send-window, the same data path, read 4.1× the
      // ref's CPU per push. So its ref runs on twin shards started alike, lesson on.
      const twinned = a.measure === 'incast';
      progress(
        `ablation −${a.name}: starting shards (${args.join(' ')})${twinned ? " and the ref's twins" : ''}`,
      );
      [own, twin] = await Promise.all([
        startShards(args),
        twinned ? startShards(serverArgsOf(c.tuning)) : undefined,
      ]);
    }
    progress(`ablation −${a.name}: connecting`);
    const options = ablatedTarget(a, c.tuning);
    [t, twinClient] = await Promise.all([
      spawn(own ?? c.set, options),
      twin === undefined ? undefined : spawn(twin, { tuning: c.tuning, variant: REF }),
    ]);
    const full = twinClient ?? c.full;
    const ref = twinClient ?? c.full.as(REF);
    let refRow: Result;
    let row: Result;
    if (a.measure === 'fetch') {
      const w = c.workload;
      progress(`ablation −${a.name}: warm-up and capacity probe (ref and −${a.name} by turns)`);
      await warmUpFetch(t, c.probeMs);
      const caps = await measureCapacities([ref, t], c.probeMs, progress);
      const refCap = caps.get(ref) as Capacity;
      const own = caps.get(t) as Capacity;
      const { rate, basis } = ablationFetchRate(c.fetchRate, own.rps);
      const base = fetchOp(HEADLINE_LOAD, false);
      progress(`ablation −${a.name}: ${base} (${rate} req/s), ref and −${a.name} by turns`);
      const plan = (x: ClientProcess, label: string, cap: Capacity): FetchRowPlan => ({
        t: x,
        rate,
        row: {
          op: `${base} ${label}`,
          baselineOp: base,
          load: HEADLINE_LOAD,
          loadBasis: basis,
          headlineRps: c.fetchRate,
          capacityRps: cap.rps,
          capacityConcurrency: cap.concurrency,
        },
      });
      const [r0, r1] = await measureFetchRows(
        [plan(ref, REF, refCap), plan(t, `−${a.name}`, own)],
        w,
        c.fetchMs,
        71,
        progress,
      );
      refRow = { ...(r0 as Result), ...(await footprint(full)) };
      row = { ...(r1 as Result), ...(await footprint(t)) };
    } else if (a.measure === 'incast') {
      progress(`ablation −${a.name}: push-incast×${HEADLINE_CONCURRENCY}`);
      // Shard counts only from shards of a row's own (else they would mix both rows).
      const sides = [
        { client: full, shards: twin },
        { client: t, shards: own },
      ] as const;
      const before = await Promise.all(sides.map((x) => queueCounts(x.client, x.shards)));
      const rows = await runTraining(
        [ref, t],
        { ...c.training, concurrency: [HEADLINE_CONCURRENCY] },
        progress,
      );
      const after = await Promise.all(sides.map((x) => queueCounts(x.client, x.shards)));
      refRow = {
        ...(rows.find((r) => r.op.endsWith(REF)) as Result),
        ...(await footprint(full)),
        ...queueDelta(before[0], after[0]),
      };
      row = {
        ...(rows.find((r) => !r.op.endsWith(REF)) as Result),
        ...(await footprint(t)),
        ...queueDelta(before[1], after[1]),
      };
    } else {
      throw new Error(`ablation ${a.name}: ${a.measure} is not measured on the live shards`);
    }
    return [refRow, compareWithReference(a, row, refRow)];
  } finally {
    await Promise.all([t?.close(), twinClient?.close()]);
    await Promise.all([own?.stop(), twin?.stop()]);
  }
}

/**
 * The recovery ablation: the shard-kill scenario again with the ablated client, against the
 * full system's kill row of this run (`reference`).
 */
export async function runFailureAblation(
  a: Ablation,
  reference: Result | undefined,
  provider: 'soft' | 'ibverbs',
  tuning: RdmaTuning,
  o: FailureOptions,
  progress: (label: string) => void,
): Promise<Result> {
  const durable = await PsShardSet.start({
    shards: EVAL_SHARDS,
    tables: EVAL_TABLES,
    secret: EVAL_SECRET,
    transports: ['rdma'],
    provider,
    durable: true,
    args: ablatedServerArgs(a, tuning),
  });
  try {
    const t = await RdmajsPsTarget.connect(
      durable.servers('rdma'),
      'rdma',
      provider,
      ablatedTarget(a, tuning),
    );
    try {
      const row = await runFailure(durable, t, o, progress);
      return reference === undefined ? row : compareWithReference(a, row, reference);
    } finally {
      await t.close();
    }
  } finally {
    await durable.stop();
  }
}

import { GrpcStoreServer, grpcServersGc } from '../../baselines/grpc/GrpcStoreServer.js';
import { PsShardSet } from '../../peers/PsShardSet.js';
import { formatRatio, formatSize } from '../../report/format.js';
import type { Result } from '../../report/Result.js';
import type { HeadlineValues } from '../../report/summary.js';
import { floorSummary, wakeupFloor } from '../../stats/wakeupFloor.js';
import type { Scenario, ScenarioOptions } from '../Scenario.js';
import { ABLATIONS, type Ablation } from './ablations.js';
import { type ClientPools, ClientProcess } from './ClientProcess.js';
import { type FailureOptions, runFailure } from './failure.js';
import {
  fetchOp,
  fetchWorkload,
  HEADLINE_LOAD,
  type InferenceOptions,
  runInference,
} from './inference.js';
import { runLoggedIncast } from './loggedIncast.js';
import { EVAL_SECRET, EVAL_SHARDS, EVAL_TABLES, GRPC_TABLES, RdmajsPsTarget } from './PsTarget.js';
import { type RdmaTuning, serverArgsOf } from './RdmaTuning.js';
import { runFailureAblation, runLiveAblation } from './runAblations.js';
import {
  HEADLINE_CONCURRENCY,
  pushBatches,
  runTraining,
  type TrainingOptions,
} from './training.js';

const KEY_SPACE = 1_000_000;
const ZIPF = 0.99;

/** How long each part runs: the default fits the issue's ≤ 3 minutes on 2 cores, --quick about a minute. */
export function plan(
  quick: boolean,
  rdma: 'soft' | 'ibverbs',
  fetchOnly = process.env.BENCH_EVAL_ONLY === 'fetch',
  incastOnly = process.env.BENCH_EVAL_ONLY === 'incast',
): {
  inference: InferenceOptions;
  training: TrainingOptions;
  failure: FailureOptions;
  ablations: readonly Ablation[];
  ablationFetchMs: number;
  /** The headline incast again on shards that log every push (the full run only). */
  loggedIncast: boolean;
  /** Only the headline fetch rows (`BENCH_EVAL_ONLY=fetch`): no training, failure, ablations. */
  fetchOnly: boolean;
  /** Only the headline push-incast rows (`BENCH_EVAL_ONLY=incast`): no fetch, failure, ablations. */
  incastOnly: boolean;
} {
  const loads = quick || fetchOnly ? [HEADLINE_LOAD] : [0.25, 0.5, 0.75, 1];
  return {
    fetchOnly,
    incastOnly,
    failure: {
      beforeMs: quick ? 500 : 1500,
      afterMs: quick ? 500 : 1500,
      keys: 24,
      concurrency: 4,
    },
    inference: {
      loads,
      // gRPC at fractions of its own capacity, where it is not saturated; TCP and RDMA at
      // the headline fraction of it too: the same request rate, what grpcFetchMeanRatio
      // compares.
      grpcLoads: { grpc: loads, tcp: [HEADLINE_LOAD], [rdma]: [HEADLINE_LOAD] },
      durationMs: quick ? 1000 : 5000,
      probeMs: quick ? 500 : 1500,
      requests: 1024,
      keySpace: KEY_SPACE,
      zipfExponent: ZIPF,
    },
    training: {
      concurrency:
        quick || incastOnly ? [HEADLINE_CONCURRENCY] : [1, 16, HEADLINE_CONCURRENCY, 256],
      keysPerPush: 256,
      samples: quick ? 128 : incastOnly ? 2048 : 512,
      keySpace: KEY_SPACE,
      zipfExponent: ZIPF,
    },
    // --quick runs one ablation (zero-copy, at the headline fetch load); the full run all.
    ablations: quick ? ABLATIONS.filter((a) => a.name === 'zero-copy') : ABLATIONS,
    ablationFetchMs: quick ? 1000 : 2000,
    loggedIncast: !quick && !incastOnly,
  };
}

/** The paper's headline figures, read off this run's rows (RDMA ÷ TCP, RDMA ÷ gRPC). */
export function evaluationHeadlines(results: Result[]): HeadlineValues {
  const shared = fetchOp(HEADLINE_LOAD, false);
  const atGrpcRate = fetchOp(HEADLINE_LOAD, true);
  const pushOp = `push-incast×${HEADLINE_CONCURRENCY}`;
  const row = (transport: string, op: string) =>
    results.find((r) => r.transport === transport && r.op === op);
  const rdma = results.find((r) => r.transport === 'soft' || r.transport === 'ibverbs')?.transport;
  const out: HeadlineValues = {};
  if (rdma === undefined) return out;
  const f = row(rdma, shared);
  const ft = row('tcp', shared);
  if (f && ft) {
    out.fetchMeanRatio = f.meanUs / ft.meanUs;
    out.fetchP99Ratio = f.p99Us / ft.p99Us;
    out.fetchCpuRatio = f.cpuUsPerOp / ft.cpuUsPerOp;
  }
  // Both at half gRPC's closed-loop capacity: the same rate, gRPC busy but not saturated.
  const fo = row(rdma, atGrpcRate);
  const go = row('grpc', atGrpcRate);
  if (fo && go) out.grpcFetchMeanRatio = fo.meanUs / go.meanUs;
  const fg = row('grpc', shared);
  if (f && fg) out.grpcFetchMeanRatioSameLoad = f.meanUs / fg.meanUs;
  const p = row(rdma, pushOp);
  const pt = row('tcp', pushOp);
  if (p && pt) out.pushP99Ratio = p.p99Us / pt.p99Us;
  return out;
}

const rps = (x: unknown) => (typeof x === 'number' ? x.toFixed(x >= 100 ? 0 : 1) : '?');

/**
 * What rate a fetch ablation ran at and whether it was served: its capacity against the
 * ref's (the throughput the lesson buys), the rate both ran at when the headline rate was
 * more than the ablated target could serve, and a row offered more than it served, labelled.
 */
function rateNotes(r: Result, ref: Result | undefined): string[] {
  if (typeof r.offeredRps !== 'number') return [];
  const notes: string[] = [];
  if (typeof r.capacityVsRef === 'number')
    notes.push(
      `capacity ${rps(r.capacityRps)} vs ${rps(ref?.capacityRps)} req/s (${formatRatio(r.capacityVsRef)})`,
    );
  if (r.loadBasis === 'ablated-capacity')
    notes.push(
      `both at ${rps(r.offeredRps)} req/s, half its capacity (the headline ${rps(r.headlineRps)} req/s is more than that)`,
    );
  for (const [who, x] of [
    ['it', r],
    ['the ref', ref],
  ] as const)
    if (x?.pastCapacity === true)
      notes.push(
        `PAST CAPACITY (${who}): served ${rps(x.achievedRps)} of ${rps(x.offeredRps)} req/s offered, ${x.dropped} dropped: its latency is a queue`,
      );
  return notes;
}

/**
 * The ref an ablation row was measured beside: several ablations share a ref op (each is
 * measured back to back with its own `… ref` row), so the nearest one before it, else after.
 */
function referenceOf(results: readonly Result[], i: number): Result | undefined {
  const r = results[i] as Result;
  const isRef = (x: Result) => x.transport === r.transport && x.op === r.referenceOp;
  for (let j = i - 1; j >= 0; j--) if (isRef(results[j] as Result)) return results[j];
  for (let j = i + 1; j < results.length; j++) if (isRef(results[j] as Result)) return results[j];
  return undefined;
}

/** The ablation block under the table: each lesson off against the full system measured beside it. */
export function renderAblations(results: Result[]): string {
  const lines = ['ablations: one lesson off, against the full system measured back to back (ref)'];
  for (const [i, r] of results.entries()) {
    if (typeof r.ablation !== 'string') continue;
    const extra: string[] = [];
    const ref = referenceOf(results, i);
    if (typeof r.qps === 'number' && typeof ref?.qps === 'number')
      extra.push(`${r.qps} QPs vs ${ref.qps}`);
    if (typeof r.registeredBytes === 'number' && typeof ref?.registeredBytes === 'number')
      extra.push(
        `${formatSize(r.registeredBytes)} vs ${formatSize(ref.registeredBytes as number)} registered (client)`,
      );
    if (typeof r.shardQueueEmptied === 'number')
      extra.push(
        `shards' receive queue ran dry ${r.shardQueueEmptied}× vs ${ref?.shardQueueEmptied ?? '?'}× (client's ${r.clientQueueEmptied ?? '?'}× vs ${ref?.clientQueueEmptied ?? '?'}×; RNR NAKs with credits off)`,
      );
    // A push that fails is not timed: the kill row's latencies say nothing of the lesson.
    const figures = r.op.startsWith('push-shard-killed')
      ? [
          `acked ${r.acked} vs ${ref?.acked ?? '?'}`,
          `${r.failed} failed vs ${ref?.failed ?? '?'} (${r.failedAppliedMin}–${r.failedAppliedMax} of them applied anyway, per shard)`,
          `lost ${r.lost}, duplicated ${r.duplicated}`,
          `kill → first ack ${Number(r.recoveryMs).toFixed(0)} ms vs ${Number(ref?.recoveryMs).toFixed(0)} ms`,
        ]
      : [
          `mean ${formatRatio(r.meanVsRef as number)}, p99 ${formatRatio(r.p99VsRef as number)}, CPU/op ${formatRatio(r.cpuVsRef as number)} the ref`,
          ...rateNotes(r, ref),
          ...extra,
        ];
    lines.push(
      `  −${String(r.ablation).padEnd(10)} ${r.op.padEnd(28)} ${figures.join('; ')}`,
      `   ${''.padEnd(10)} instead: ${r.instead}`,
    );
  }
  return lines.join('\n');
}

export const evaluationScenario: Scenario = {
  name: 'evaluation',
  description: `the paper's evaluation on the parameter server (${EVAL_SHARDS} shards): inference fetch (Zipf keys, mixed batches, open-loop loads up to the TCP capacity, and every target at fractions of gRPC's capacity) and training push incast (1 … 256 clients), our server over TCP and RDMA (the same shard processes) and the same service over gRPC, CPU of every process; a shard SIGKILLed mid-stream under each transport; ablations (one lesson off at a time)`,
  headlines: evaluationHeadlines,
  // The machine's wake-up floor first: what no event-driven row of the table can beat here.
  summarize: (results) =>
    [floorSummary(results), renderAblations(results)].filter((x) => x).join('\n'),
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const p = plan(o.quick === true, o.provider);
    const tuning: RdmaTuning = o.rdma ?? {};
    const shardArgs = serverArgsOf(tuning);
    const sides = (['tcp', 'rdma'] as const).filter((t) => o.transports.includes(t));
    const results: Result[] = [];
    // Each target's clients run in their own process (ClientProcess), as a user's do: their
    // own GC and event loop; the servers are the shard processes and the gRPC servers.
    const targets: ClientProcess[] = [];
    const grpcServers: GrpcStoreServer[] = [];
    const workload = fetchWorkload(p.inference);
    const pools: ClientPools = { fetch: workload.requests, push: pushBatches(p.training) };
    let set: PsShardSet | undefined;
    try {
      // Before any shard runs: the floor of the idle machine, for the summary.
      progress('machine wake-up floor');
      results.push(await wakeupFloor('cross-vcpu'));
      progress(`starting shards (${sides.join(', ')}, grpc)`);
      if (sides.length > 0) {
        const shards = await PsShardSet.start({
          shards: EVAL_SHARDS,
          tables: EVAL_TABLES,
          secret: EVAL_SECRET,
          transports: sides,
          provider: o.provider,
          args: shardArgs,
        });
        set = shards;
        for (const side of sides) {
          progress(`starting the ${side} client process`);
          targets.push(
            await ClientProcess.spawn(
              {
                kind: 'rdmajs',
                side,
                provider: o.provider,
                servers: shards.servers(side),
                options: { tuning },
              },
              {
                transport: side === 'tcp' ? 'tcp' : o.provider,
                serverPids: () => shards.pids,
                serverGc: () => shards.gcCounts(),
                pools,
              },
            ),
          );
        }
      }
      // Settled all, so one that fails leaves none of the others running (closed below).
      const started = await Promise.allSettled(
        Array.from({ length: EVAL_SHARDS }, () => GrpcStoreServer.start(GRPC_TABLES)),
      );
      for (const s of started) if (s.status === 'fulfilled') grpcServers.push(s.value);
      const failed = started.find((s) => s.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
      progress('starting the grpc client process');
      targets.push(
        await ClientProcess.spawn(
          { kind: 'grpc', ports: grpcServers.map((s) => s.port) },
          {
            transport: 'grpc',
            serverPids: () => grpcServers.map((s) => s.pid),
            serverGc: () => grpcServersGc(grpcServers),
            pools,
          },
        ),
      );
      if (p.incastOnly) return [...results, ...(await runTraining(targets, p.training, progress))];
      results.push(...(await runInference(targets, workload, p.inference, progress)));
      if (p.fetchOnly) return results;
      results.push(...(await runTraining(targets, p.training, progress)));
      const full = targets.find((t) => t.transport === o.provider);
      const headline = results.find((r) => r.op === fetchOp(HEADLINE_LOAD, false));
      if (set && full && headline) {
        for (const a of p.ablations.filter((x) => x.measure !== 'failure')) {
          results.push(
            ...(await runLiveAblation(
              a,
              {
                set,
                full,
                provider: o.provider,
                tuning,
                workload,
                pools,
                fetchRate: headline.offeredRps as number,
                fetchMs: p.ablationFetchMs,
                probeMs: p.inference.probeMs,
                training: p.training,
              },
              progress,
            )),
          );
        }
      }
    } finally {
      await Promise.all(targets.splice(0).map((t) => t.close()));
      await Promise.all(grpcServers.splice(0).map((s) => s.close()));
      await set?.stop();
    }
    if (p.loggedIncast)
      results.push(
        ...(await runLoggedIncast(
          { sides, provider: o.provider, tuning, shardArgs, pools, training: p.training },
          progress,
        )),
      );
    // --quick kills a shard under the last transport only (RDMA when it runs).
    for (const side of o.quick ? sides.slice(-1) : sides) {
      progress(`failure scenario (${side})`);
      const durable = await PsShardSet.start({
        shards: EVAL_SHARDS,
        tables: EVAL_TABLES,
        secret: EVAL_SECRET,
        transports: [side],
        provider: o.provider,
        durable: true,
        args: shardArgs,
      });
      try {
        const t = await RdmajsPsTarget.connect(durable.servers(side), side, o.provider, {
          tuning,
        });
        try {
          results.push(await runFailure(durable, t, p.failure, progress));
        } finally {
          await t.close();
        }
      } finally {
        await durable.stop();
      }
    }
    if (sides.includes('rdma')) {
      const reference = results.find(
        (r) => r.transport === o.provider && r.op === 'push-shard-killed',
      );
      for (const a of p.ablations.filter((x) => x.measure === 'failure')) {
        progress(`ablation −${a.name}: shard killed`);
        results.push(
          await runFailureAblation(a, reference, o.provider, tuning, p.failure, progress),
        );
      }
    }
    return results;
  },
};

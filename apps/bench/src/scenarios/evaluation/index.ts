import { PsShardSet } from '../../peers/PsShardSet.js';
import type { HeadlineKey } from '../../report/paper.js';
import type { Result } from '../../report/Result.js';
import type { Scenario, ScenarioOptions } from '../Scenario.js';
import { type FailureOptions, runFailure } from './failure.js';
import { HEADLINE_LOAD, type InferenceOptions, runInference } from './inference.js';
import {
  EVAL_SECRET,
  EVAL_SHARDS,
  EVAL_TABLES,
  GrpcPsTarget,
  type PsTarget,
  RdmajsPsTarget,
} from './PsTarget.js';
import { HEADLINE_CONCURRENCY, runTraining, type TrainingOptions } from './training.js';

const KEY_SPACE = 1_000_000;
const ZIPF = 0.99;

/** How long each part runs: the default fits the issue's ≤ 3 minutes on 2 cores, --quick seconds. */
function plan(quick: boolean): {
  inference: InferenceOptions;
  training: TrainingOptions;
  failure: FailureOptions;
} {
  return {
    failure: {
      beforeMs: quick ? 500 : 1500,
      afterMs: quick ? 500 : 1500,
      keys: 24,
      concurrency: 4,
    },
    inference: {
      loads: quick ? [0.5] : [0.25, 0.5, 0.75, 1],
      durationMs: quick ? 1000 : 5000,
      requests: 1024,
      keySpace: KEY_SPACE,
      zipfExponent: ZIPF,
    },
    training: {
      concurrency: quick ? [HEADLINE_CONCURRENCY] : [1, 16, HEADLINE_CONCURRENCY, 256],
      keysPerPush: 256,
      samples: quick ? 128 : 512,
      keySpace: KEY_SPACE,
      zipfExponent: ZIPF,
    },
  };
}

/** The paper's headline figures, read off this run's rows (RDMA ÷ TCP, RDMA ÷ gRPC). */
export function evaluationHeadlines(results: Result[]): Partial<Record<HeadlineKey, number>> {
  const fetchOp = `fetch@${Math.round(HEADLINE_LOAD * 100)}%`;
  const pushOp = `push-incast×${HEADLINE_CONCURRENCY}`;
  const row = (transport: string, op: string) =>
    results.find((r) => r.transport === transport && r.op === op);
  const rdma = results.find((r) => r.transport === 'soft' || r.transport === 'ibverbs')?.transport;
  const out: Partial<Record<HeadlineKey, number>> = {};
  if (rdma === undefined) return out;
  const f = row(rdma, fetchOp);
  const ft = row('tcp', fetchOp);
  const fg = row('grpc', fetchOp);
  if (f && ft) {
    out.fetchMeanRatio = f.meanUs / ft.meanUs;
    out.fetchP99Ratio = f.p99Us / ft.p99Us;
    out.fetchCpuRatio = f.cpuUsPerOp / ft.cpuUsPerOp;
  }
  if (f && fg) out.grpcFetchMeanRatio = f.meanUs / fg.meanUs;
  const p = row(rdma, pushOp);
  const pt = row('tcp', pushOp);
  if (p && pt) out.pushP99Ratio = p.p99Us / pt.p99Us;
  return out;
}

export const evaluationScenario: Scenario = {
  name: 'evaluation',
  description: `the paper's evaluation on the parameter server (${EVAL_SHARDS} shards): inference fetch (Zipf keys, mixed batches, open-loop loads up to the TCP capacity) and training push incast (1 … 256 clients), our server over TCP and RDMA (the same shard processes) and the same service over gRPC, CPU of every process; then a shard SIGKILLed mid-stream under each transport`,
  headlines: evaluationHeadlines,
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const p = plan(o.quick === true);
    const sides = (['tcp', 'rdma'] as const).filter((t) => o.transports.includes(t));
    const results: Result[] = [];
    const targets: PsTarget[] = [];
    let set: PsShardSet | undefined;
    try {
      progress(`starting shards (${sides.join(', ')}, grpc)`);
      if (sides.length > 0) {
        set = await PsShardSet.start({
          shards: EVAL_SHARDS,
          tables: EVAL_TABLES,
          secret: EVAL_SECRET,
          transports: sides,
          provider: o.provider,
        });
        for (const side of sides) targets.push(await RdmajsPsTarget.connect(set, side, o.provider));
      }
      targets.push(await GrpcPsTarget.start());
      results.push(...(await runInference(targets, p.inference, progress)));
      results.push(...(await runTraining(targets, p.training, progress)));
    } finally {
      await Promise.all(targets.splice(0).map((t) => t.close()));
      await set?.stop();
    }
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
      });
      try {
        const t = await RdmajsPsTarget.connect(durable, side, o.provider);
        try {
          results.push(await runFailure(durable, t, p.failure, progress));
        } finally {
          await t.close();
        }
      } finally {
        await durable.stop();
      }
    }
    return results;
  },
};

import type { Result } from '../../report/Result.js';
import { addProcessGc, type ProcessGc } from '../../stats/GcCounts.js';
import type { ClientProcess, Costed } from './ClientProcess.js';
import type { IncastRowReply } from './clientProtocol.js';
import { gcFields } from './gcFields.js';
import { perOp } from './inference.js';
import { EVAL_DIM } from './PsTarget.js';
import { ZipfKeys } from './ZipfKeys.js';

export interface TrainingOptions {
  /** Logical clients pushing at once (the incast fan-in). */
  concurrency: readonly number[];
  keysPerPush: number;
  /** Pushes measured per cell (at least two bursts). */
  samples: number;
  keySpace: number;
  zipfExponent: number;
}

const nameOf = (t: ClientProcess) =>
  t.variant === undefined ? t.transport : `${t.transport} ${t.variant}`;

/** The fan-in the headline incast ratio is read at. */
export const HEADLINE_CONCURRENCY = 64;
const DISTINCT_BATCHES = 32;
const GAP_MS = 2;
/** Training warm-up pushes per target before its first incast row. */
const PUSH_WARMUP = 100;
/** Unmeasured incast bursts (of `HEADLINE_CONCURRENCY` pushes) per target after those. */
const WARMUP_BURSTS = 16;
/** Rounds an incast row's bursts are cut into (at most one burst each). */
const INCAST_ROUNDS = 4;
/** What a push is expected to take at most on a loaded host, for a row's deadline. */
const PUSH_BUDGET_MS = 50;

/** The push key batches of every incast row (Zipf keys: hot keys repeat across clients). */
export function pushBatches(o: TrainingOptions): BigUint64Array[] {
  const zipf = new ZipfKeys(o.keySpace, o.zipfExponent, 4242);
  return Array.from({ length: DISTINCT_BATCHES }, () =>
    zipf.fill(new BigUint64Array(o.keysPerPush)),
  );
}

/**
 * Training push, bursty incast (`runIncast`): `c` logical clients push a gradient batch each at
 * the same moment (as data-parallel workers do after a step), all to the same shards; the next
 * burst starts once every push of this one is acknowledged, after a short gap. Latency is per
 * push, from the burst's start. Bursts run in each target's own client process (which holds
 * `pushBatches(o)`), in rounds the targets take in turn; no GC is forced between rows.
 */
export async function runTraining(
  targets: readonly ClientProcess[],
  o: TrainingOptions,
  progress: (label: string) => void,
): Promise<Result[]> {
  const results: Result[] = [];
  for (const t of targets) {
    progress(`training warm-up (${nameOf(t)})`);
    await t.warmUp(0, PUSH_WARMUP);
    // Then bursts as the rows push, unmeasured: a fresh process spends its first thousands of
    // pushes compiling (push-cpu.js, fresh vs warm processes: RDMA ÷ TCP CPU per push
    // 1.22–1.25× vs 0.79–0.89×); after only sequential pushes the rows measured that.
    await t.incast(
      {
        concurrency: HEADLINE_CONCURRENCY,
        bursts: WARMUP_BURSTS,
        gapMs: GAP_MS,
        firstBurst: 0,
        fresh: true,
      },
      WARMUP_BURSTS * (GAP_MS + HEADLINE_CONCURRENCY * PUSH_BUDGET_MS),
    );
  }
  for (const [ci, c] of o.concurrency.entries()) {
    const bursts = Math.max(2, Math.ceil(o.samples / c));
    const rounds = Math.min(INCAST_ROUNDS, bursts);
    const order = targets.map((_, i) => targets[(i + ci) % targets.length] as ClientProcess);
    const serversUs = order.map(() => 0);
    const serversGc = order.map((): ProcessGc[] => []);
    // Event-loop wake-ups over the row's rounds (NaN once a round could not read them).
    const clientWakeups = order.map(() => 0);
    const serversWakeups = order.map(() => 0);
    const last: (Costed<IncastRowReply> | undefined)[] = order.map(() => undefined);
    // Rounds of bursts, the targets taking turns (first one rotating), as the fetch rows do.
    for (let round = 0; round < rounds; round++) {
      const firstBurst = Math.floor((round * bursts) / rounds);
      const n = Math.floor(((round + 1) * bursts) / rounds) - firstBurst;
      for (let j = 0; j < order.length; j++) {
        const i = (j + round) % order.length;
        const t = order[i] as ClientProcess;
        progress(
          `training incast ${nameOf(t)}, ${c} clients × ${bursts} bursts, round ${round + 1}/${rounds}`,
        );
        const r = await t.incast(
          { concurrency: c, bursts: n, gapMs: GAP_MS, firstBurst, fresh: round === 0 },
          n * (GAP_MS + c * PUSH_BUDGET_MS),
        );
        serversUs[i] = (serversUs[i] as number) + r.serversCpuUs;
        addProcessGc(serversGc[i] as ProcessGc[], r.serversGc);
        clientWakeups[i] = (clientWakeups[i] as number) + (r.clientWakeups ?? Number.NaN);
        serversWakeups[i] = (serversWakeups[i] as number) + (r.serversWakeups ?? Number.NaN);
        last[i] = r;
      }
    }
    for (const [i, t] of order.entries()) {
      const r = last[i] as Costed<IncastRowReply>;
      const op = `push-incast×${c}`;
      results.push({
        transport: t.transport,
        op: t.variant === undefined ? op : `${op} ${t.variant}`,
        baselineOp: op,
        sizeBytes: o.keysPerPush * EVAL_DIM * 4,
        concurrency: c,
        ...r.latency,
        cpuUsPerOp: (r.cpuUs + (serversUs[i] as number)) / Math.max(1, r.count),
        // Where a push's CPU goes: the client process, and every shard together.
        clientCpuUsPerOp: perOp(r.cpuUs, r.count),
        serverCpuUsPerOp: perOp(serversUs[i] as number, r.count),
        clientWakeupsPerOp: perOp(clientWakeups[i] as number, r.count),
        serverWakeupsPerOp: perOp(serversWakeups[i] as number, r.count),
        pushesPerSec: r.count / (r.busyMs / 1000),
        failed: r.failed,
        seconds: r.seconds,
        rssBytes: r.rssBytes + r.serversRssBytes,
        ...gcFields({ pid: t.pid, ...r.gc }, serversGc[i] as ProcessGc[], r.count),
      });
    }
  }
  return results;
}

import { PsClient } from '@rdmajs/ps-client';
import { openDevice } from '@rdmajs/verbs';
import { TCP_BASELINE_OPTIONS } from '../baselines/tcpFrames.js';
import { PsShardSet } from '../peers/PsShardSet.js';
import type { Result } from '../report/Result.js';
import { cpuNowUs, procCpuUs } from '../stats/cpu.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';
import { callsFor } from './grpc-store.js';
import type { Scenario, ScenarioOptions } from './Scenario.js';

/** `PS_BENCH_BATCHES=1,256` / `PS_BENCH_DIMS=64`: a part of the grid (quick looks). */
const listEnv = (name: string): number[] | undefined =>
  process.env[name]?.split(',').map((x) => {
    const n = Number(x);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${name}: ${x} is not a positive integer`);
    return n;
  });

/** Keys per call and row widths measured (the grid, first version). */
export const PS_BATCHES: readonly number[] = listEnv('PS_BENCH_BATCHES') ?? [1, 16, 256, 4096];
export const PS_DIMS: readonly number[] = listEnv('PS_BENCH_DIMS') ?? [8, 64, 256];
const SHARDS = 3;
const KEY_SPACE = 1_000_000;
const DISTINCT_BATCHES = 16;
const SECRET = 'rdmajs-bench-ps-secret-0123456789';
/** `PS_BENCH_EAGER=<bytes>`: the RDMA eager threshold of servers and client (default mux's 32 KiB). */
const EAGER =
  process.env.PS_BENCH_EAGER === undefined ? undefined : Number(process.env.PS_BENCH_EAGER);

function keyBatches(batch: number, seed: number): BigUint64Array[] {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % KEY_SPACE;
  };
  return Array.from({ length: DISTINCT_BATCHES }, () =>
    BigUint64Array.from({ length: batch }, () => BigInt(next() + 1)),
  );
}

type Side = 'tcp' | 'rdma';

/**
 * Warm-up pulls and pushes per client before the first row. TurboFan compiles the ~240 hot
 * functions of client and shards in background threads over the first ~2 000 calls on a loaded
 * 2-core machine (measured: shard CPU per 256-key pull ≈ 270 µs after 300 warm-up calls,
 * ≈ 100 µs after 3 000); rows measured before that count compile time, not the transport.
 */
const WARMUP_CALLS = 1500;

/** Rounds per row: each side runs a quarter of its calls in turn, so load drifts hit both alike. */
const ROUNDS = 4;

export const psScenario: Scenario = {
  name: 'ps',
  description: `the networked parameter server: ${SHARDS} rdmajs-ps-server processes listening on RDMA (soft) and TCP at once + one PsClient per transport, interleaved; pull and push round trip and CPU of all processes per call, batches ${PS_BATCHES.join(', ')} keys × dims ${PS_DIMS.join(', ')}`,
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const sides: Side[] = (['tcp', 'rdma'] as const).filter((t) => o.transports.includes(t));
    let set: PsShardSet | undefined;
    const results: Result[] = [];
    const clients = new Map<Side, PsClient>();
    try {
      if (sides.length === 0) return results;
      progress('starting ps shards');
      set = await PsShardSet.start({
        shards: SHARDS,
        tables: PS_DIMS.map((dim) => ({
          name: `emb${dim}`,
          dim,
          optimizer: { kind: 'adagrad', lr: 0.01 },
        })),
        secret: SECRET,
        transports: sides,
        provider: o.provider,
        idPrefix: 'b',
        args: EAGER === undefined ? [] : ['--rdma-eager-threshold', String(EAGER)],
      });
      const shards = set;
      for (const side of sides) {
        clients.set(
          side,
          await PsClient.connect({
            servers: shards.servers(side),
            transport: side,
            tcp: TCP_BASELINE_OPTIONS,
            ...(side === 'rdma'
              ? {
                  rdma: {
                    ...(o.provider === 'soft'
                      ? {}
                      : { device: openDevice({ provider: o.provider }) }),
                    ...(EAGER === undefined ? {} : { eagerThreshold: EAGER }),
                  },
                }
              : {}),
            secret: SECRET,
          }),
        );
      }
      const allCpu = () => cpuNowUs() + shards.pids.reduce((a, pid) => a + procCpuUs(pid), 0);
      // Warm every path once (JIT, connections, first rows) so the first rows measured are not
      // the slowest; each row still has its own warm-up below.
      progress('ps warm-up');
      for (const c of clients.values()) {
        for (let k = 0; k < WARMUP_CALLS; k++) {
          const dim = PS_DIMS[k % PS_DIMS.length] as number;
          const keys = BigUint64Array.from({ length: 16 }, (_, i) => BigInt(k * 16 + i + 1));
          (await c.pull(`emb${dim}`, keys)).release();
          await c.push(`emb${dim}`, keys, new Float32Array(16 * dim));
        }
      }
      for (const dim of PS_DIMS) {
        for (const batch of PS_BATCHES) {
          const batches = keyBatches(batch, batch * 7919 + dim);
          const grads = new Float32Array(batch * dim).fill(0.001);
          const calls = callsFor(batch, o.iterations);
          const perRound = Math.max(1, Math.ceil(calls / ROUNDS));
          for (const op of ['pull', 'push'] as const) {
            progress(`ps ${op} ${batch} keys × dim ${dim}`);
            const call = async (c: PsClient, k: number) => {
              const keys = batches[k % DISTINCT_BATCHES] as BigUint64Array;
              // A pull hands out views of the replies; releasing them is part of the call.
              if (op === 'pull') (await c.pull(`emb${dim}`, keys)).release();
              else await c.push(`emb${dim}`, keys, grads);
            };
            const warmup = Math.max(10, Math.floor(calls / 10));
            const recs = new Map(sides.map((s) => [s, new LatencyRecorder()]));
            const cpu = new Map(sides.map((s) => [s, 0]));
            const done = new Map(sides.map((s) => [s, 0]));
            for (const side of sides) {
              const c = clients.get(side) as PsClient;
              for (let k = 0; k < warmup; k++) await call(c, k);
            }
            for (let round = 0; round < ROUNDS; round++) {
              for (const side of sides) {
                const c = clients.get(side) as PsClient;
                const rec = recs.get(side) as LatencyRecorder;
                const n = Math.min(perRound, calls - round * perRound);
                const cpu0 = allCpu();
                for (let k = 0; k < n; k++) {
                  const t0 = performance.now();
                  await call(c, warmup + round * perRound + k);
                  rec.record((performance.now() - t0) * 1000);
                }
                cpu.set(side, (cpu.get(side) as number) + allCpu() - cpu0);
                done.set(side, (done.get(side) as number) + n);
              }
            }
            for (const side of sides) {
              const row = `ps-${op}/d${dim}`;
              results.push({
                transport: side === 'tcp' ? 'tcp' : o.provider,
                op: row,
                ...(side === 'rdma' ? { baselineOp: row } : {}),
                sizeBytes: batch * dim * 4,
                batchKeys: batch,
                dim,
                ...(recs.get(side) as LatencyRecorder).summary(),
                cpuUsPerOp: (cpu.get(side) as number) / Math.max(1, done.get(side) as number),
              });
            }
          }
        }
      }
    } finally {
      await Promise.allSettled([...clients.values()].map((c) => c.close()));
      await set?.stop();
    }
    return results;
  },
  summarize(results: Result[]): string {
    const lines: string[] = [];
    const find = (t: string, op: string, batch: number, dim: number) =>
      results.find(
        (r) => r.transport === t && r.op === op && r.batchKeys === batch && r.dim === dim,
      );
    for (const r of results.filter((x) => x.transport !== 'tcp')) {
      const b = find('tcp', r.op, r.batchKeys as number, r.dim as number);
      if (b === undefined) continue;
      const mean = r.meanUs / b.meanUs;
      const p99 = r.p99Us / b.p99Us;
      const headline = r.op === 'ps-pull/d64' && r.batchKeys === 256;
      const target = headline
        ? ` (targets mean ≤ 0.5×: ${mean <= 0.5 ? 'met' : 'missed'}, p99 ≤ 0.4×: ${p99 <= 0.4 ? 'met' : 'missed'})`
        : '';
      lines.push(
        `${r.op} ${r.batchKeys} keys, ${r.transport} / tcp: mean ${mean.toFixed(2)}x, p50 ${(r.p50Us / b.p50Us).toFixed(2)}x, p99 ${p99.toFixed(2)}x, CPU/call ${(r.cpuUsPerOp / b.cpuUsPerOp).toFixed(2)}x${target}`,
      );
    }
    return lines.join('\n');
  },
};

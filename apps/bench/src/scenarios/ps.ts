import { PsClient } from '@rdmajs/ps-client';
import { openDevice } from '@rdmajs/verbs';
import { TCP_BASELINE_OPTIONS } from '../baselines/tcpFrames.js';
import { PsShardSet } from '../peers/PsShardSet.js';
import type { Result } from '../report/Result.js';
import { collectGarbage } from '../stats/collectGarbage.js';
import { cpuNowUs, procThreadsCpuUs } from '../stats/cpu.js';
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

/**
 * Warm-up calls per side before each row (at most its measured calls): the row's own shape
 * still compiles after the global warm-up's 16-key calls — measured, 256 keys × dim 64 on soft
 * RDMA alone, CPU per pull of all processes ≈ 1 340 µs after 100 warm-up calls, ≈ 590 after
 * 3 000 (TCP 2 135 / 956; load 11–14): with 10 % of the calls as warm-up, rows measured that
 * compile.
 */
const ROW_WARMUP_CALLS = 1000;

/**
 * Rounds per row: the sides take turns, a block of calls each, the first side alternating, so
 * load bursts of the shared host (they make the tail: the slowest 1 % of calls spent most of
 * their time runnable but not running) hit both alike. Blocks of ≈ 25 calls, 4 to 40 rounds.
 */
const roundsFor = (calls: number): number => Math.min(40, Math.max(4, Math.floor(calls / 25)));

/**
 * Calls per side at most 256 keys: the p99 of the target row (256 keys) needs enough
 * calls beyond it to be a percentile (312 left 3), and such calls take about a millisecond.
 */
const MIN_CALLS = 1000;
const MIN_CALLS_MAX_BATCH = 256;

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
      // Exact per thread (schedstat), so blocks of a few ms split their CPU between the sides.
      const shardCpu = () => shards.pids.reduce((a, pid) => a + procThreadsCpuUs(pid), 0);
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
          const calls = Math.max(
            callsFor(batch, o.iterations),
            batch <= MIN_CALLS_MAX_BATCH ? Math.min(MIN_CALLS, o.iterations) : 0,
          );
          const rounds = roundsFor(calls);
          const perRound = Math.max(1, Math.ceil(calls / rounds));
          for (const op of ['pull', 'push'] as const) {
            progress(`ps ${op} ${batch} keys × dim ${dim}`);
            const call = async (c: PsClient, k: number) => {
              const keys = batches[k % DISTINCT_BATCHES] as BigUint64Array;
              // A pull hands out views of the replies; releasing them is part of the call.
              if (op === 'pull') (await c.pull(`emb${dim}`, keys)).release();
              else await c.push(`emb${dim}`, keys, grads);
            };
            // As many warm-up calls as measured ones, up to ROW_WARMUP_CALLS, taking turns
            // like the rounds: the shards' code is shared, so neither side warms it for the other.
            const warmup = Math.min(calls, ROW_WARMUP_CALLS);
            const recs = new Map(sides.map((s) => [s, new LatencyRecorder()]));
            const cpu = new Map(sides.map((s) => [s, 0]));
            const done = new Map(sides.map((s) => [s, 0]));
            for (let k0 = 0, turn = 0; k0 < warmup; k0 += perRound, turn++) {
              for (const side of turn % 2 === 0 ? sides : [...sides].reverse()) {
                const c = clients.get(side) as PsClient;
                for (let k = k0; k < Math.min(warmup, k0 + perRound); k++) await call(c, k);
              }
            }
            for (let round = 0; round < rounds; round++) {
              const n = Math.min(perRound, calls - round * perRound);
              if (n <= 0) break;
              for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
                const c = clients.get(side) as PsClient;
                const rec = recs.get(side) as LatencyRecorder;
                // The other side's garbage is collected before this side's window, not in it
                // (both clients share this process; a TCP pull leaves its reply Buffers).
                collectGarbage();
                // The reads of the shards' CPU stay outside the client's window.
                const shard0 = shardCpu();
                const own0 = cpuNowUs();
                for (let k = 0; k < n; k++) {
                  const t0 = performance.now();
                  await call(c, warmup + round * perRound + k);
                  rec.record((performance.now() - t0) * 1000);
                }
                const own = cpuNowUs() - own0;
                cpu.set(side, (cpu.get(side) as number) + own + shardCpu() - shard0);
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

import { PsClientPeer } from '../peers/PsClientPeer.js';
import { PsShardSet } from '../peers/PsShardSet.js';
import { psTableName } from '../peers/psWorkload.js';
import type { Result } from '../report/Result.js';
import { procThreadsCpuUs } from '../stats/cpu.js';
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
const SECRET = 'rdmajs-bench-ps-secret-0123456789';
/** `PS_BENCH_EAGER=<bytes>`: the RDMA eager threshold of servers and client (default mux's 32 KiB). */
const EAGER =
  process.env.PS_BENCH_EAGER === undefined ? undefined : Number(process.env.PS_BENCH_EAGER);

type Side = 'tcp' | 'rdma';

/**
 * Warm-up pulls and pushes per client (in its own process) before the first row. TurboFan compiles the ~240 hot
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
  description: `the networked parameter server: ${SHARDS} rdmajs-ps-server processes listening on RDMA (soft) and TCP at once + one PsClient per transport, each in its own process, interleaved; pull and push round trip and CPU of all processes per call, batches ${PS_BATCHES.join(', ')} keys × dims ${PS_DIMS.join(', ')}`,
  async run(o: ScenarioOptions, progress: (label: string) => void): Promise<Result[]> {
    const sides: Side[] = (['tcp', 'rdma'] as const).filter((t) => o.transports.includes(t));
    let set: PsShardSet | undefined;
    const results: Result[] = [];
    // Each transport's client runs in its own process (PsClientPeer): its garbage is collected
    // there, inside its own calls, as a user's client process pays it, never in the other
    // side's window; so no forced GC between blocks (one would slow the calls after it).
    const peers = new Map<Side, PsClientPeer>();
    let ok = false;
    try {
      if (sides.length === 0) return results;
      progress('starting ps shards');
      set = await PsShardSet.start({
        shards: SHARDS,
        tables: PS_DIMS.map((dim) => ({
          name: psTableName(dim),
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
      progress('starting ps clients');
      const started = await Promise.allSettled(
        sides.map((side) =>
          PsClientPeer.spawn({
            side,
            servers: shards.servers(side),
            secret: SECRET,
            provider: o.provider,
            ...(EAGER === undefined ? {} : { eagerThreshold: EAGER }),
          }),
        ),
      );
      for (const s of started) if (s.status === 'fulfilled') peers.set(s.value.side, s.value);
      const failed = started.find((s) => s.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
      const peer = (side: Side) => peers.get(side) as PsClientPeer;
      // Exact per thread (schedstat), so blocks of a few ms split their CPU between the sides.
      const shardCpu = () => shards.pids.reduce((a, pid) => a + procThreadsCpuUs(pid), 0);
      // Warm every path once (JIT, connections, first rows) so the first rows measured are not
      // the slowest; each row still has its own warm-up below. One client at a time.
      progress('ps warm-up');
      for (const side of sides) await peer(side).warmUp(WARMUP_CALLS, PS_DIMS);
      for (const dim of PS_DIMS) {
        for (const batch of PS_BATCHES) {
          const seed = batch * 7919 + dim;
          const calls = Math.max(
            callsFor(batch, o.iterations),
            batch <= MIN_CALLS_MAX_BATCH ? Math.min(MIN_CALLS, o.iterations) : 0,
          );
          const rounds = roundsFor(calls);
          const perRound = Math.max(1, Math.ceil(calls / rounds));
          for (const op of ['pull', 'push'] as const) {
            progress(`ps ${op} ${batch} keys × dim ${dim}`);
            const block = { call: op, dim, batch, seed };
            // As many warm-up calls as measured ones, up to ROW_WARMUP_CALLS, taking turns
            // like the rounds: the shards' code is shared, so neither side warms it for the other.
            const warmup = Math.min(calls, ROW_WARMUP_CALLS);
            const recs = new Map(sides.map((s) => [s, new LatencyRecorder()]));
            const cpu = new Map(sides.map((s) => [s, 0]));
            const done = new Map(sides.map((s) => [s, 0]));
            for (let k0 = 0, turn = 0; k0 < warmup; k0 += perRound, turn++) {
              for (const side of turn % 2 === 0 ? sides : [...sides].reverse()) {
                const n = Math.min(warmup, k0 + perRound) - k0;
                await peer(side).block({ ...block, from: k0, n, measure: false });
              }
            }
            for (let round = 0; round < rounds; round++) {
              const n = Math.min(perRound, calls - round * perRound);
              if (n <= 0) break;
              for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
                const rec = recs.get(side) as LatencyRecorder;
                // The reads of the shards' CPU stay outside the client's window (the peer
                // times its calls itself, so neither these reads nor IPC are in it).
                const shard0 = shardCpu();
                const r = await peer(side).block({
                  ...block,
                  from: warmup + round * perRound,
                  n,
                  measure: true,
                });
                const shardUs = shardCpu() - shard0;
                for (const us of r.latenciesUs) rec.record(us);
                cpu.set(side, (cpu.get(side) as number) + r.cpuUs + shardUs);
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
      ok = true;
    } finally {
      // A failed run does not wait for graceful closes: its peers may be stuck mid-call.
      await Promise.allSettled([...peers.values()].map((p) => (ok ? p.close() : p.kill())));
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

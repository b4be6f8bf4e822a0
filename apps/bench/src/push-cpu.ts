// Focused push-path profile: CPU per push of the client process and of every shard, TCP and
// RDMA (soft) interleaved against the very same 3 shard processes, pushes in incast bursts.
// Why a script of its own: the evaluation's incast row mixes many things (a cold client
// process, gRPC rounds in between, 4 short rounds); this isolates one question, "what does a
// push cost each side", warm or cold (`--warmup 2` is close to the evaluation's row).
//
//   node dist/push-cpu.js [--rounds 5] [--bursts 16] [--concurrency 64] [--keys 256]
//                         [--warmup 40] [--pause-ms 0] [--only tcp|rdma] [--eager bytes] [--reconnect]
//
// Each round runs `bursts` bursts on TCP and on RDMA (the order alternates per round) and
// prints client and shard CPU µs per push (schedstat, every thread), p50/p99 from the burst's
// start, the shards' GCs and minor page faults per push; then the means, and where the CPU
// went by thread (main or other: V8 helpers, libuv pool). BENCH_CPU_PROF_DIR makes the
// shards write V8 CPU profiles (`node --cpu-prof` this script for the client's).
//
// Measured with it (2 vCPUs shared with other jobs, 3 runs each, total CPU per push RDMA ÷ TCP):
// warm (default warm-up) 0.83–0.99×; `--warmup 2 --reconnect`: fresh processes 1.22–1.25× (the
// evaluation's incast row, whose client and shards are fresh processes: 1.18–1.29×), then fresh
// connections to the same, warm processes 0.79–0.89× (shards 188–251 vs 261–333 µs). RDMA's
// excess is per process, not per connection (leases, pools, sessions are new in both phases):
// warm-up of its longer JS path (about half of a cold shard's CPU is on non-main threads, V8's
// compilers and GC helpers). Eager 64 KiB vs 32 KiB (1 of the 96 shard parts of the batches is
// 33 KiB, so rendezvous): 0.84–0.87× vs 0.75–1.09×, within the noise.
import { readdirSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { PsShardSet } from './peers/PsShardSet.js';
import { runIncast } from './scenarios/evaluation/incast.js';
import {
  EVAL_DIM,
  EVAL_SECRET,
  EVAL_SHARDS,
  EVAL_TABLES,
  RdmajsPsTarget,
} from './scenarios/evaluation/PsTarget.js';
import { ZipfKeys } from './scenarios/evaluation/ZipfKeys.js';
import { cpuNowUs, procThreadsCpuUs } from './stats/cpu.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    bursts: { type: 'string', default: '16' },
    concurrency: { type: 'string', default: '64' },
    keys: { type: 'string', default: '256' },
    // One transport only (for a profile of it alone); default both, interleaved.
    only: { type: 'string' },
    warmup: { type: 'string', default: '40' },
    // Idle time before each measured run, ms: the evaluation runs other targets in between.
    'pause-ms': { type: 'string', default: '0' },
    // RDMA eager threshold of both sides, bytes (default: the transport's).
    eager: { type: 'string' },
    // Then close the clients, connect fresh ones to the same (now warm) shards and measure
    // again: what stays cold per connection (leases, pools, sessions) vs per process (JIT).
    reconnect: { type: 'boolean', default: false },
  },
});
const rounds = Number(values.rounds);
const bursts = Number(values.bursts);
const concurrency = Number(values.concurrency);
const keysPerPush = Number(values.keys);
const pauseMs = Number(values['pause-ms']);

const zipf = new ZipfKeys(1_000_000, 0.99, 4242);
const batches = Array.from({ length: 32 }, () => zipf.fill(new BigUint64Array(keysPerPush)));
const grads = new Float32Array(keysPerPush * EVAL_DIM).fill(0.001);

const set = await PsShardSet.start({
  shards: EVAL_SHARDS,
  tables: EVAL_TABLES,
  secret: EVAL_SECRET,
  transports: ['tcp', 'rdma'],
  provider: 'soft',
  ...(values.eager === undefined ? {} : { args: ['--rdma-eager-threshold', values.eager] }),
});
const sides = (['tcp', 'rdma'] as const).filter(
  (s) => values.only === undefined || values.only === s,
);
const connect = async () => ({
  tcp: await RdmajsPsTarget.connect(set.servers('tcp'), 'tcp', 'soft'),
  rdma: await RdmajsPsTarget.connect(
    set.servers('rdma'),
    'rdma',
    'soft',
    values.eager === undefined ? {} : { tuning: { eagerThreshold: Number(values.eager) } },
  ),
});
let targets = await connect();
// Warm-up: every key of the batches inserted, JIT warm, receive leases grown.
const warmupBursts = Number(values.warmup);
/** CPU ms of each thread (by name) of `pids`, from /proc: where a process's time goes. */
function threadsMs(pids: readonly number[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const pid of pids) {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        const st = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        const name = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')'));
        const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
        const ms = (Number(f[11]) + Number(f[12])) * 10; // utime + stime, USER_HZ 100
        // The main thread by name; others (libuv pool, V8 platform workers) as a group.
        const key = tid === String(pid) ? `${name} main` : `${name} other`;
        out.set(key, (out.get(key) ?? 0) + ms);
      } catch {
        // the thread ended meanwhile
      }
    }
  }
  return out;
}
/** Minor page faults of `pid` so far (first touches of fresh registered memory show here). */
function minorFaults(pid: number): number {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[7]);
}
const faults = () => ({
  client: minorFaults(process.pid),
  shards: set.pids.reduce((a, p) => a + minorFaults(p), 0),
});
const shardsCpu = () => set.pids.reduce((a, p) => a + procThreadsCpuUs(p), 0);
/** Warm-up, then the measured rounds, printed; `label` names the phase. */
async function measure(label: string): Promise<void> {
  console.log(label);
  const total = { tcp: { c: 0, s: 0, n: 0 }, rdma: { c: 0, s: 0, n: 0 } };
  const threads0 = { shards: new Map<string, number>(), client: new Map<string, number>() };
  for (const side of sides) {
    const t = targets[side];
    await runIncast((b, w) => t.push(batches[(b * 7 + w) % 32] as BigUint64Array, grads, w), {
      concurrency,
      bursts: warmupBursts,
      gapMs: 2,
    });
  }
  threads0.shards = threadsMs(set.pids);
  threads0.client = threadsMs([process.pid]);
  for (let r = 0; r < rounds; r++) {
    const line: string[] = [];
    for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
      const t = targets[side];
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
      const c0 = cpuNowUs();
      const s0 = shardsCpu();
      const f0 = faults();
      const g0 = await set.gcCounts();
      const run = await runIncast(
        (b, w) => t.push(batches[(b * 7 + w) % 32] as BigUint64Array, grads, w),
        { concurrency, bursts, gapMs: 2 },
      );
      const n = bursts * concurrency - run.failed;
      const c = (cpuNowUs() - c0) / n;
      const s = (shardsCpu() - s0) / n;
      const f1 = faults();
      const g1 = await set.gcCounts();
      const gc = (k: 'major' | 'minor') =>
        g1.reduce((a, g) => a + g[k], 0) - g0.reduce((a, g) => a + g[k], 0);
      total[side].c += c;
      total[side].s += s;
      total[side].n++;
      const p = run.latency.summary();
      line.push(
        `${side.padEnd(4)} client ${c.toFixed(0).padStart(4)} shards ${s.toFixed(0).padStart(4)} µs/push  p50 ${(p.p50Us / 1000).toFixed(1)} p99 ${(p.p99Us / 1000).toFixed(1)} ms  shard GCs ${gc('minor')}/${gc('major')}  faults/push ${((f1.client - f0.client) / n).toFixed(1)}+${((f1.shards - f0.shards) / n).toFixed(1)}  failed ${run.failed}`,
      );
    }
    console.log(`round ${r + 1}: ${line.join(' | ')}`);
  }
  for (const side of sides) {
    if (total[side].n === 0) continue;
    const x = total[side];
    console.log(
      `mean ${side}: client ${(x.c / x.n).toFixed(0)} shards ${(x.s / x.n).toFixed(0)} total ${((x.c + x.s) / x.n).toFixed(0)} µs/push`,
    );
  }
  // Per thread name (main thread, libuv pool, V8 GC helpers, …) over the measured rounds.
  for (const [who, now] of [
    ['shards', threadsMs(set.pids)],
    ['client', threadsMs([process.pid])],
  ] as const) {
    const before = threads0[who];
    const d = [...now]
      .map(([k, v]) => [k, v - (before.get(k) ?? 0)] as const)
      .filter(([, v]) => v > 0);
    console.log(`${who} threads ms: ${d.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  }
}
try {
  await measure('fresh processes and connections');
  if (values.reconnect) {
    await targets.tcp.close();
    await targets.rdma.close();
    targets = await connect();
    await measure('fresh connections to the same processes (warm)');
  }
} finally {
  await targets.tcp.close();
  await targets.rdma.close();
  await set.stop();
}

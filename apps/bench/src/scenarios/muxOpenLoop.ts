// The open-loop rows of `pnpm bench mux`: every transport is offered the same message rate
// (Poisson arrivals over 16 channels, a fraction of TCP's x16 closed-loop capacity measured in
// the same run), in rounds interleaved between the transports, so "CPU per message at the same
// offered load" is compared at one load, not at each transport's own closed-loop throughput.
import type { Connection } from '@rdmajs/mux';
import type { Result } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { bothWakeups } from '../stats/loopWakeups.js';
import { OpenLoopLatency } from './evaluation/OpenLoopLatency.js';
import { runOpenLoop } from './evaluation/openLoop.js';
import { cpuSplitLines } from './muxCpuModel.js';
import { EchoChannel } from './muxEchoChannel.js';

/** Channels the offered messages are spread over (round robin). */
export const OPEN_CHANNELS = 16;
/** Offered loads, as fractions of TCP's x16 closed-loop capacity of the same run. */
export const OPEN_LOADS = [0.25, 0.5];
/** The row issue 11's "CPU per message ≤ 0.7× TCP at the same offered load" is read at. */
export const TARGET_LOAD = 0.5;
export const TARGET_POLICY = 'adaptive';
/** `MUX_BENCH_OPEN_ROUNDS`, `MUX_BENCH_OPEN_ROUND_MS`: rounds per transport and load, and their length. */
const ROUNDS = Number(process.env.MUX_BENCH_OPEN_ROUNDS ?? 3);
const ROUND_MS = Number(process.env.MUX_BENCH_OPEN_ROUND_MS ?? 2000);
/** Messages in flight beyond which an arrival is dropped and counted (a transport past capacity). */
const MAX_OUTSTANDING = 4096;

export function openLoopOp(load: number): string {
  return `mux-open x${OPEN_CHANNELS} @${Math.round(load * 100)}%`;
}

/** One transport under test: its connection to its own echo peer, whose CPU it reads. */
export interface OpenLoopTarget {
  transport: Result['transport'];
  /** '' for TCP; ' event' etc. for RDMA. */
  suffix: string;
  conn: Connection;
  peerCpu(): Promise<number>;
  /** The echo peer's process id: its wake-ups are counted with this process's. */
  peerPid?: number | undefined;
}

interface Tally {
  cpuUs: number;
  completed: number;
  dropped: number;
  failed: number;
  seconds: number;
  /** CPU per message of each round (both processes), µs. */
  rounds: number[];
  /** Wake-ups of both processes (NaN once a round could not count them). */
  wakeups: number;
  latency: OpenLoopLatency;
}

/**
 * The open-loop rows: for each load, `ROUNDS` rounds in which every target runs once (the
 * order rotating by round, each round's arrivals drawn from the same seed for every target).
 */
export async function openLoopRows(
  targets: OpenLoopTarget[],
  capacity: number,
  progress: (label: string) => void,
): Promise<Result[]> {
  const results: Result[] = [];
  const payload = new Uint8Array(64).fill(5);
  const channels = new Map<OpenLoopTarget, EchoChannel[]>();
  for (const t of targets)
    channels.set(
      t,
      Array.from({ length: OPEN_CHANNELS }, () => new EchoChannel(t.conn.openChannel('open'))),
    );
  try {
    // Warm: each transport's open-loop path (several messages per wake-up) compiled once.
    progress('mux open loop warm-up');
    for (const t of targets) {
      const chs = channels.get(t) as EchoChannel[];
      await runOpenLoop((k) => (chs[k % OPEN_CHANNELS] as EchoChannel).roundTrip(payload), {
        rate: capacity * Math.max(...OPEN_LOADS),
        durationMs: Math.min(ROUND_MS, 1000),
        maxOutstanding: MAX_OUTSTANDING,
        seed: 7,
      });
    }
    for (const load of OPEN_LOADS) {
      const rate = capacity * load;
      const tallies = targets.map(
        (): Tally => ({
          cpuUs: 0,
          completed: 0,
          dropped: 0,
          failed: 0,
          seconds: 0,
          rounds: [],
          wakeups: 0,
          latency: new OpenLoopLatency(),
        }),
      );
      for (let round = 0; round < ROUNDS; round++) {
        for (let j = 0; j < targets.length; j++) {
          const i = (j + round) % targets.length;
          const t = targets[i] as OpenLoopTarget;
          const tally = tallies[i] as Tally;
          const chs = channels.get(t) as EchoChannel[];
          progress(`${t.transport}${t.suffix} ${openLoopOp(load)} round ${round + 1}`);
          const peer0 = await t.peerCpu();
          const woken0 = bothWakeups(t.peerPid);
          const cpu0 = cpuNowUs();
          const r = await runOpenLoop(
            (k) => (chs[k % OPEN_CHANNELS] as EchoChannel).roundTrip(payload),
            { rate, durationMs: ROUND_MS, maxOutstanding: MAX_OUTSTANDING, seed: 1000 + round },
            tally.latency,
          );
          const cpu = cpuNowUs() - cpu0 + ((await t.peerCpu()) - peer0);
          const woken1 = bothWakeups(t.peerPid);
          tally.wakeups +=
            woken0 === undefined || woken1 === undefined ? Number.NaN : woken1 - woken0;
          tally.cpuUs += cpu;
          tally.completed += r.completed;
          tally.dropped += r.dropped;
          tally.failed += r.failed;
          tally.seconds += r.seconds;
          tally.rounds.push(cpu / Math.max(1, r.completed));
        }
      }
      targets.forEach((t, i) => {
        const tally = tallies[i] as Tally;
        const service = tally.latency.service.summary();
        const fromArrival = tally.latency.fromArrival.summary();
        const op = openLoopOp(load);
        results.push({
          transport: t.transport,
          op: `${op}${t.suffix}`,
          sizeBytes: 64,
          ...service,
          cpuUsPerOp: tally.cpuUs / Math.max(1, tally.completed),
          cpuUsPerOpRounds: tally.rounds,
          channels: OPEN_CHANNELS,
          offeredRps: rate,
          achievedRps: tally.completed / tally.seconds,
          dropped: tally.dropped,
          failed: tally.failed,
          coMeanUs: fromArrival.meanUs,
          coP99Us: fromArrival.p99Us,
          lagP99Us: tally.latency.lag.summary().p99Us,
          // The peer's CPU is read over IPC (one wake-up each side per read, a few per round).
          ...(Number.isNaN(tally.wakeups)
            ? {}
            : { wakeupsPerMsg: tally.wakeups / Math.max(1, tally.completed) }),
          ...(t.transport === 'tcp' ? {} : { baselineOp: op }),
        });
      });
    }
  } finally {
    for (const chs of channels.values()) await Promise.all(chs.map((ch) => ch.close()));
  }
  return results;
}

/**
 * The summary lines of the open-loop rows, the target first: each RDMA row's CPU per
 * message ÷ TCP's at the same load, overall and per round (the spread of the interleaved rounds).
 */
export function openLoopSummary(results: Result[]): string[] {
  const lines: string[] = [];
  const rows = results.filter((r) => r.op.startsWith('mux-open '));
  const tcpRow = (op: string) => rows.find((r) => r.transport === 'tcp' && r.op === op);
  const describe = (r: Result): string | undefined => {
    const base = tcpRow(r.baselineOp as string);
    if (base === undefined) return undefined;
    const mine = r.cpuUsPerOpRounds as number[];
    const theirs = base.cpuUsPerOpRounds as number[];
    const perRound = mine.map((c, i) => c / (theirs[i] ?? Number.NaN));
    return (
      `${r.op}: CPU per message ${(r.cpuUsPerOp / base.cpuUsPerOp).toFixed(2)}x TCP ` +
      `(${r.cpuUsPerOp.toFixed(1)} vs ${base.cpuUsPerOp.toFixed(1)} µs, both processes; rounds ` +
      `${perRound.map((x) => x.toFixed(2)).join(', ')}), p50 ${(r.p50Us / base.p50Us).toFixed(2)}x TCP, ` +
      `${Math.round(r.achievedRps as number)} of ${Math.round(r.offeredRps as number)} msg/s served` +
      ((r.dropped as number) > 0 ? `, ${r.dropped} DROPPED (past capacity)` : '')
    );
  };
  const target = rows.find((r) => r.op === `${openLoopOp(TARGET_LOAD)} ${TARGET_POLICY}`);
  const head = target === undefined ? undefined : describe(target);
  if (target !== undefined && head !== undefined) {
    const ratio = target.cpuUsPerOp / (tcpRow(target.baselineOp as string) as Result).cpuUsPerOp;
    lines.push(
      `issue 11 target "CPU per message ≤ 0.7× TCP at the same offered load" is read at row ` +
        `${target.op} (${TARGET_POLICY}, ${Math.round(TARGET_LOAD * 100)} % of TCP's x${OPEN_CHANNELS} ` +
        `capacity): ${ratio.toFixed(2)}x — ${ratio <= 0.7 ? 'met' : 'NOT met'}`,
    );
  }
  for (const r of rows) {
    if (r.transport === 'tcp') continue;
    const line = describe(r);
    if (line !== undefined) lines.push(line);
  }
  lines.push(...cpuSplitLines(rows));
  return lines;
}

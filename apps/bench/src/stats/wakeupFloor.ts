import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type { Result } from '../report/Result.js';
import { LatencyRecorder } from './LatencyRecorder.js';

/**
 * The two sides of the wake-up ping-pong, plain JavaScript run by `eval` (no loader needed,
 * from the sources or compiled). The word at index 0 counts turns: the pinger writes odd
 * values, the ponger even ones, each sleeps in Atomics.wait (a futex behind V8's condition
 * variable) until the other writes and notifies. The pinger times every round trip and reads
 * the CPU of the whole process (process.cpuUsage: every thread) around the measured ones.
 */
const SIDE = `
const { workerData, parentPort } = require('node:worker_threads');
const { sab, role, warmup, iterations, cpu } = workerData;
const turn = new Int32Array(sab);
let pinned = false;
if (cpu !== undefined) {
  // This thread only (its tid from /proc/thread-self): the other side goes elsewhere. A CPU
  // the process may not use (a cpuset, taskset) fails the call: the side runs unpinned.
  try {
    const tid = require('node:fs').readlinkSync('/proc/thread-self').split('/').pop();
    require('node:child_process').execFileSync('taskset', ['-p', '-c', String(cpu), tid], { stdio: 'ignore' });
    pinned = true;
  } catch {}
}
const total = warmup + iterations;
if (role === 'pong') {
  for (let k = 0; k < total; k++) {
    while (Atomics.load(turn, 0) !== 2 * k + 1) Atomics.wait(turn, 0, 2 * k);
    Atomics.store(turn, 0, 2 * k + 2);
    Atomics.notify(turn, 0);
  }
  parentPort.postMessage({ pinned });
} else {
  const samples = new Float64Array(iterations);
  let cpu0 = process.cpuUsage();
  for (let k = 0; k < total; k++) {
    if (k === warmup) cpu0 = process.cpuUsage();
    const t0 = performance.now();
    Atomics.store(turn, 0, 2 * k + 1);
    Atomics.notify(turn, 0);
    while (Atomics.load(turn, 0) !== 2 * k + 2) Atomics.wait(turn, 0, 2 * k + 1);
    if (k >= warmup) samples[k - warmup] = (performance.now() - t0) * 1000;
  }
  const cpu = process.cpuUsage(cpu0);
  parentPort.postMessage({ samples, cpuUs: cpu.user + cpu.system, pinned }, [samples.buffer]);
}
`;

/** No side waits longer than this for the other (a round trip takes tens of µs). */
const WAKEUP_TIMEOUT_MS = 60_000;

function side(
  sab: SharedArrayBuffer,
  role: 'ping' | 'pong',
  warmup: number,
  iterations: number,
  cpu: number | undefined,
) {
  const w = new Worker(SIDE, { eval: true, workerData: { sab, role, warmup, iterations, cpu } });
  return new Promise<unknown>((resolve, reject) => {
    const timer = setTimeout(() => {
      void w.terminate();
      reject(
        new Error(`wake-up floor: the ${role} thread did not finish in ${WAKEUP_TIMEOUT_MS} ms`),
      );
    }, WAKEUP_TIMEOUT_MS);
    w.once('message', (m) => {
      clearTimeout(timer);
      resolve(m);
    });
    w.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

/** Where the two threads of the floor run: on two vCPUs, or both on one. */
export type FloorPlacement = 'cross-vcpu' | 'same-vcpu';

/**
 * The first two CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status: a
 * cpuset or `taskset` may leave CPU 0 or 1 out), if `taskset` (util-linux) is here to pin
 * threads onto them; undefined otherwise.
 */
function pinnableCpus(): [number, number] | undefined {
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
    const line = /^Cpus_allowed_list:\s*(\S+)/m.exec(readFileSync('/proc/self/status', 'utf8'));
    const cpus: number[] = [];
    for (const range of line?.[1]?.split(',') ?? []) {
      const [lo, hi = lo] = range.split('-').map(Number);
      for (let c = lo as number; c <= (hi as number) && cpus.length < 2; c++) cpus.push(c);
      if (cpus.length === 2) return [cpus[0] as number, cpus[1] as number];
    }
    return undefined;
  } catch {
    return undefined;
  }
}

/**
 * This machine's wake-up floor: two threads of one process ping-pong, each sleeping until
 * the other wakes it (Atomics.wait/notify, the cheapest wake-up Node has). Every event-driven
 * round trip between two processes pays at least this: one sleep and one wake-up per side,
 * in the kernel's scheduler, whatever the transport. Pinned `cross-vcpu` (the first two CPUs
 * this process may use: what
 * two processes pay when the scheduler puts them apart, as it does under load) or
 * `same-vcpu` (both on the first: a hand-off without an inter-processor wake-up); unpinned where
 * `taskset` or a second CPU is missing (`placement: 'unpinned'`). The reference row `machine
 * wakeup-floor` (`wakeup-floor-same-vcpu`): latency per round trip, CPU of the whole process
 * per round trip.
 */
export async function wakeupFloor(
  placement: FloorPlacement = 'cross-vcpu',
  iterations = 20_000,
  warmup = 2_000,
): Promise<Result> {
  const cpus = pinnableCpus();
  const [pingCpu, pongCpu] =
    cpus === undefined ? [] : placement === 'cross-vcpu' ? cpus : [cpus[0], cpus[0]];
  const sab = new SharedArrayBuffer(4);
  const pong = side(sab, 'pong', warmup, iterations, pongCpu) as Promise<{ pinned: boolean }>;
  const ping = side(sab, 'ping', warmup, iterations, pingCpu) as Promise<{
    samples: Float64Array;
    cpuUs: number;
    pinned: boolean;
  }>;
  const [{ samples, cpuUs, pinned: pingPinned }, { pinned: pongPinned }] = await Promise.all([
    ping,
    pong,
  ]);
  const pinned = pingPinned && pongPinned;
  const rec = new LatencyRecorder();
  for (const us of samples) rec.record(us);
  // No CDF: the report draws one chart per message size, and the floor moves no message.
  const { cdf: _cdf, ...latency } = rec.summary();
  return {
    transport: 'machine',
    op: placement === 'cross-vcpu' ? 'wakeup-floor' : 'wakeup-floor-same-vcpu',
    sizeBytes: 0,
    ...latency,
    cpuUsPerOp: cpuUs / iterations,
    placement: pinned ? placement : 'unpinned',
  };
}

/** The floor in one line, for a scenario's summary (`same`: the same-vCPU row, if measured). */
export function wakeupFloorLine(r: Result, same?: Result): string {
  const where = r.placement === 'cross-vcpu' ? 'two threads on two vCPUs' : 'two threads';
  const shared = same
    ? ` (${same.cpuUsPerOp.toFixed(1)} µs / ${same.p50Us.toFixed(1)} µs when both share one vCPU)`
    : '';
  return `this machine's wake-up floor: ${r.cpuUsPerOp.toFixed(1)} µs CPU / ${r.p50Us.toFixed(1)} µs per round trip between ${where}${shared}; every event-driven round trip pays it at least once per side`;
}

/** The floor line of a run's reference rows, or '' when the run has none. */
export function floorSummary(results: Result[]): string {
  const cross = results.find((r) => r.transport === 'machine' && r.op === 'wakeup-floor');
  const same = results.find((r) => r.transport === 'machine' && r.op === 'wakeup-floor-same-vcpu');
  return cross ? wakeupFloorLine(cross, same) : '';
}

// How often processes slept and were woken: the voluntary context switches of each one's
// main thread (the event loop's), from /proc/<pid>/status. A wake-up from idle costs
// ≈ 100–150 µs of CPU on the 2-vCPU VM (a soft shard: ≈ 140 µs of main-thread CPU per
// wake-up at 450 fetches/s, ≈ 105 µs at 2 000/s), more than a request's own work, so the
// mux same-load rows and the evaluation's fetch and incast rows report wake-ups per op
// beside CPU per op: a ratio can be read against them.
import { readFileSync } from 'node:fs';

const VOLUNTARY = /^voluntary_ctxt_switches:\s+(\d+)$/m;

/** Voluntary context switches of `pid`'s main thread so far; undefined without /proc. */
export function wakeups(pid: number | 'self'): number | undefined {
  try {
    const m = VOLUNTARY.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m === null ? undefined : Number(m[1]);
  } catch {
    return undefined;
  }
}

/** Wake-ups of every process in `pids` so far; undefined when any one cannot be read. */
export function sumWakeups(pids: readonly (number | 'self')[]): number | undefined {
  let sum = 0;
  for (const pid of pids) {
    const n = wakeups(pid);
    if (n === undefined) return undefined;
    sum += n;
  }
  return sum;
}

/** Wake-ups of this process and `peerPid` together (undefined when either cannot be read). */
export function bothWakeups(peerPid: number | undefined): number | undefined {
  return peerPid === undefined ? undefined : sumWakeups(['self', peerPid]);
}

import { readFileSync } from 'node:fs';

/**
 * Times a process's main thread (its event loop) went to sleep and was woken so far: the
 * `voluntary_ctxt_switches` of `/proc/<pid>/status` (Linux), or undefined where that cannot
 * be read (another OS, the process gone). Why count them: at low load a fetch costs about
 * one cold wake-up per process it touches, and a wake-up's CPU, not the work done in it,
 * is most of a fetch's CPU there (soft RDMA, 3 shards: ≈ 140 µs of a shard's main-thread CPU
 * per wake-up at 450 fetches/s, ≈ 105 µs at 2 000/s, where two requests share one).
 */
export function procLoopWakeups(pid: number): number | undefined {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'latin1');
  } catch {
    return undefined;
  }
  return parseVoluntarySwitches(status);
}

/** `voluntary_ctxt_switches` of a `/proc/<pid>/status` text, or undefined when absent. */
export function parseVoluntarySwitches(status: string): number | undefined {
  const m = /^voluntary_ctxt_switches:\s*(\d+)\s*$/m.exec(status);
  return m === null ? undefined : Number(m[1]);
}

/** Wake-ups of every process in `pids` so far; undefined when any one cannot be read. */
export function sumLoopWakeups(pids: readonly number[]): number | undefined {
  let sum = 0;
  for (const pid of pids) {
    const n = procLoopWakeups(pid);
    if (n === undefined) return undefined;
    sum += n;
  }
  return sum;
}

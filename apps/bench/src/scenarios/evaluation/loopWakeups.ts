// The evaluation's wake-up counts: main threads' voluntary context switches (muxWakeups'
// reader), summed over a row's server processes. Why count them: at low load a fetch costs
// about one cold wake-up per process it touches, and a wake-up's CPU, not the work done in it,
// is most of a fetch's CPU there (soft RDMA, 3 shards: ≈ 140 µs of a shard's main-thread CPU
// per wake-up at 450 fetches/s, ≈ 105 µs at 2 000/s, where two requests share one).
import { wakeups } from '../muxWakeups.js';

/** Wake-ups of every process in `pids` so far; undefined when any one cannot be read. */
export function sumLoopWakeups(pids: readonly number[]): number | undefined {
  let sum = 0;
  for (const pid of pids) {
    const n = wakeups(pid);
    if (n === undefined) return undefined;
    sum += n;
  }
  return sum;
}

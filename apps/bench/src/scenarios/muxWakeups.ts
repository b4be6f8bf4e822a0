// How often a process slept and was woken: the voluntary context switches of its main thread
// (the event loop's), from /proc/<pid>/status. At the same-load rows' rates many messages
// share a wake-up, and a wake-up from idle costs tens of µs on a VM: the rows report both
// transports' wake-ups per message so a CPU ratio can be read against them.
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

/** Wake-ups of this process and `peerPid` together (undefined when either cannot be read). */
export function bothWakeups(peerPid: number | undefined): number | undefined {
  const mine = wakeups('self');
  const theirs = peerPid === undefined ? undefined : wakeups(peerPid);
  return mine === undefined || theirs === undefined ? undefined : mine + theirs;
}

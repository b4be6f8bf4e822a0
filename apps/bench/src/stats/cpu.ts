import { readdirSync, readFileSync } from 'node:fs';

/** CPU time (user + system) of this process in microseconds. */
export function cpuNowUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** CPU (user + system) of another process so far, µs, from /proc (Linux; USER_HZ is 100). */
export function procCpuUs(pid: number): number {
  const fields = procStatFields(pid);
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100; // utime, stime
}

/**
 * CPU time another process's threads have run so far, µs, exact to the nanosecond for threads
 * not running at the moment (Linux `/proc/<pid>/task/<tid>/schedstat`): fine enough to split
 * a few milliseconds of calls between the two sides of an interleaved row, where the 10 ms
 * ticks of `procCpuUs` are not. Threads that exited meanwhile drop out (their time is lost,
 * not misattributed); `procCpuUs` where this is unavailable.
 */
export function procThreadsCpuUs(pid: number): number {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return procCpuUs(pid);
  }
  let ns = 0;
  for (const tid of tids) {
    try {
      const s = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'latin1');
      ns += Number(s.slice(0, s.indexOf(' ')));
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return ns / 1000;
}

/** Resident set size of another process, bytes, from /proc (pages of 4 KiB). */
export function procRssBytes(pid: number): number {
  return Number(procStatFields(pid)[21]) * 4096;
}

/** The fields of /proc/<pid>/stat after the command name (which may hold spaces). */
function procStatFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

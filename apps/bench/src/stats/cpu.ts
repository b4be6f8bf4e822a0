import { readFileSync } from 'node:fs';

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

/** Resident set size of another process, bytes, from /proc (pages of 4 KiB). */
export function procRssBytes(pid: number): number {
  return Number(procStatFields(pid)[21]) * 4096;
}

/** The fields of /proc/<pid>/stat after the command name (which may hold spaces). */
function procStatFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

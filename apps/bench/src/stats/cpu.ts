/** CPU time (user + system) of this process in microseconds. */
export function cpuNowUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

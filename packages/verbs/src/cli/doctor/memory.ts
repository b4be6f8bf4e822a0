// Shared memory: soft allocates registered regions (and each device's 256 MiB virtual
// segment) as memfd shmem pages. Those are charged to RAM and to the process's memory
// cgroup, not to /dev/shm's size= (a memfd lives on the kernel's internal shm mount), so
// the headroom that decides is the smaller of MemAvailable and the cgroup's; /dev/shm is
// reported because container limits usually show there first.
import { type CheckContext, type CheckResult, formatBytes, result } from './check.js';
import type { Host } from './host.js';

function meminfo(host: Host, key: string): number | undefined {
  const kb = new RegExp(`^${key}:\\s+(\\d+) kB$`, 'm').exec(host.read('/proc/meminfo') ?? '')?.[1];
  return kb === undefined ? undefined : Number(kb) * 1024;
}

/** memory.max − memory.current of this process's cgroup (v2), or undefined if unlimited. */
function cgroupHeadroom(host: Host): { bytes: number; path: string } | undefined {
  const rel = /^0::(\/.*)$/m.exec(host.read('/proc/self/cgroup') ?? '')?.[1];
  if (rel === undefined) return undefined;
  const dir = `/sys/fs/cgroup${rel === '/' ? '' : rel}`;
  const max = host.read(`${dir}/memory.max`)?.trim();
  const current = Number(host.read(`${dir}/memory.current`)?.trim() ?? '0');
  if (max === undefined || max === 'max' || !Number.isFinite(Number(max))) return undefined;
  return { bytes: Math.max(0, Number(max) - current), path: dir };
}

export function checkSharedMemory(host: Host, ctx: CheckContext): CheckResult {
  const title = 'shared memory (soft registered regions)';
  const available = meminfo(host, 'MemAvailable');
  const cgroup = cgroupHeadroom(host);
  const devShm = host.freeBytes('/dev/shm');
  const headroom = Math.min(
    available ?? Number.POSITIVE_INFINITY,
    cgroup?.bytes ?? Number.POSITIVE_INFINITY,
  );
  const data = {
    memAvailableBytes: available ?? null,
    cgroupHeadroomBytes: cgroup?.bytes ?? null,
    devShmFreeBytes: devShm ?? null,
    registerBytes: ctx.registerBytes,
  };
  const parts = [
    `${formatBytes(ctx.registerBytes)} to register`,
    available === undefined ? 'MemAvailable unknown' : `MemAvailable ${formatBytes(available)}`,
    cgroup ? `cgroup headroom ${formatBytes(cgroup.bytes)}` : 'no cgroup memory limit',
    devShm === undefined
      ? 'no /dev/shm'
      : `/dev/shm free ${formatBytes(devShm)} (does not bound memfd)`,
  ];
  const detail = parts.join(', ');
  if (ctx.provider !== 'soft')
    return result('shm', title, 'skip', `${detail}; ibverbs registers ordinary memory`, { data });
  if (headroom < ctx.registerBytes)
    return result(
      'shm',
      title,
      'fail',
      `${detail}: the regions do not fit, allocMr fails or the process is OOM-killed`,
      {
        fix: cgroup
          ? `raise the cgroup's memory.max (${cgroup.path}; docker --memory, systemd MemoryMax=) or register less`
          : 'free memory on this host or register less',
        data,
      },
    );
  return result('shm', title, 'ok', detail, { data });
}

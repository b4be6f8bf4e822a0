import { describe, expect, it } from 'vitest';
import {
  CAP_IPC_LOCK,
  CAP_SYS_PTRACE,
  type CheckContext,
  formatBytes,
  parseSize,
} from '../src/cli/doctor/check.js';
import { checkKernel, checkModules } from '../src/cli/doctor/kernel.js';
import { checkMemlock } from '../src/cli/doctor/memlock.js';
import { checkSharedMemory } from '../src/cli/doctor/memory.js';
import { checkPtrace } from '../src/cli/doctor/ptrace.js';
import { caps, fakeHost, limits } from './fixtures/fake-host.js';

const MiB = 1 << 20;
const soft: CheckContext = { provider: 'soft', registerBytes: 16 * MiB };
const ibverbs: CheckContext = { provider: 'ibverbs', registerBytes: 16 * MiB };

describe('doctor: locked memory', () => {
  it('fails ibverbs when ulimit -l is below what will be registered, and says how to raise it', () => {
    const host = fakeHost({
      files: { '/proc/self/limits': limits('65536', 'unlimited'), '/proc/self/status': caps() },
    });
    const r = checkMemlock(host, ibverbs);
    expect(r.status).toBe('fail');
    expect(r.data).toMatchObject({
      softLimitBytes: 65536,
      hardLimitBytes: null,
      capIpcLock: false,
    });
    expect(r.fix).toContain('ulimit -l 16384');
  });

  it('points at limits.conf when the hard limit is too low as well', () => {
    const host = fakeHost({ files: { '/proc/self/limits': limits('65536') } });
    const r = checkMemlock(host, ibverbs);
    expect(r.status).toBe('fail');
    expect(r.fix).toContain('/etc/security/limits.conf');
  });

  it('passes with an unlimited limit, a large enough one, or CAP_IPC_LOCK', () => {
    const ok = (files: Record<string, string>) => checkMemlock(fakeHost({ files }), ibverbs).status;
    expect(ok({ '/proc/self/limits': limits('unlimited') })).toBe('ok');
    expect(ok({ '/proc/self/limits': limits(String(16 * MiB)) })).toBe('ok');
    expect(
      ok({ '/proc/self/limits': limits('65536'), '/proc/self/status': caps(CAP_IPC_LOCK) }),
    ).toBe('ok');
  });

  it('does not hold the limit against soft, which pins nothing, but still reports it', () => {
    const r = checkMemlock(fakeHost({ files: { '/proc/self/limits': limits('65536') } }), soft);
    expect(r.status).toBe('skip');
    expect(r.data).toMatchObject({ softLimitBytes: 65536 });
  });
});

describe('doctor: Yama ptrace scope', () => {
  const scope = (value: string | undefined, status = caps()) =>
    fakeHost({
      files: {
        ...(value === undefined ? {} : { '/proc/sys/kernel/yama/ptrace_scope': `${value}\n` }),
        '/proc/self/status': status,
      },
    });

  it('passes soft without Yama or with scope 0', () => {
    expect(checkPtrace(scope(undefined), soft).status).toBe('ok');
    expect(checkPtrace(scope('0'), soft).status).toBe('ok');
  });

  it('fails soft at scope 1: sibling processes cannot attach; the fix names sysctl and the TCP link', () => {
    const r = checkPtrace(scope('1'), soft);
    expect(r.status).toBe('fail');
    expect(r.detail).toContain('EPERM');
    expect(r.fix).toContain('kernel.yama.ptrace_scope=0');
    expect(r.fix).toContain("link: 'tcp'");
  });

  it('warns when CAP_SYS_PTRACE lets this process attach (the peer needs it too), fails at 3', () => {
    expect(checkPtrace(scope('1', caps(CAP_SYS_PTRACE)), soft).status).toBe('warn');
    expect(checkPtrace(scope('2', caps(CAP_SYS_PTRACE)), soft).status).toBe('warn');
    expect(checkPtrace(scope('2'), soft).status).toBe('fail');
    expect(checkPtrace(scope('3', caps(CAP_SYS_PTRACE)), soft).status).toBe('fail');
  });

  it('an unreadable value is a warning, not a verdict', () => {
    expect(checkPtrace(scope('garbage'), soft).status).toBe('warn');
  });

  it('does not apply to ibverbs', () => {
    expect(checkPtrace(scope('3'), ibverbs).status).toBe('skip');
  });
});

describe('doctor: shared memory', () => {
  const meminfo = (availKb: number) =>
    `MemTotal:       32000000 kB\nMemAvailable:   ${availKb} kB\n`;

  it('fails soft when the cgroup leaves less room than will be registered, naming memory.max', () => {
    const host = fakeHost({
      files: {
        '/proc/meminfo': meminfo(8_000_000),
        '/proc/self/cgroup': '0::/app.slice\n',
        '/sys/fs/cgroup/app.slice/memory.max': `${32 * MiB}\n`,
        '/sys/fs/cgroup/app.slice/memory.current': `${24 * MiB}\n`,
      },
      freeBytes: { '/dev/shm': 1 << 30 },
    });
    const r = checkSharedMemory(host, soft);
    expect(r.status).toBe('fail');
    expect(r.data).toMatchObject({ cgroupHeadroomBytes: 8 * MiB });
    expect(r.fix).toContain('/sys/fs/cgroup/app.slice');
  });

  it('fails soft when MemAvailable is below what will be registered', () => {
    const host = fakeHost({ files: { '/proc/meminfo': meminfo(1024) } });
    expect(checkSharedMemory(host, soft).status).toBe('fail');
  });

  it('reports a small /dev/shm without failing: memfd regions are not bounded by it', () => {
    const host = fakeHost({
      files: { '/proc/meminfo': meminfo(8_000_000), '/proc/self/cgroup': '0::/\n' },
      freeBytes: { '/dev/shm': 64 * 1024 },
    });
    const r = checkSharedMemory(host, soft);
    expect(r.status).toBe('ok');
    expect(r.data).toMatchObject({ devShmFreeBytes: 64 * 1024, cgroupHeadroomBytes: null });
  });
});

describe('doctor: kernel', () => {
  it('needs Linux 5.6 for soft (pidfd_getfd)', () => {
    expect(checkKernel(fakeHost({ kernel: '5.4.0-150-generic' }), soft).status).toBe('fail');
    expect(checkKernel(fakeHost({ kernel: '5.6.0' }), soft).status).toBe('ok');
    expect(checkKernel(fakeHost({ kernel: '6.18.44-fc' }), soft).status).toBe('ok');
    expect(checkKernel(fakeHost({ kernel: '4.19.0' }), ibverbs).status).toBe('skip');
  });

  it('finds ib_uverbs, the driver and a usable uverbs device', () => {
    const host = fakeHost({
      files: {
        '/proc/modules': 'rdma_rxe 143360 0 - Live 0x0\nib_uverbs 163840 1 rdma_rxe, Live 0x0\n',
      },
      dirs: { '/dev/infiniband': ['rdma_cm', 'uverbs0'] },
      readWrite: ['/dev/infiniband/uverbs0'],
    });
    const r = checkModules(host, ibverbs);
    expect(r.status).toBe('ok');
    expect(r.data).toMatchObject({
      ibUverbs: true,
      drivers: ['rdma_rxe'],
      uverbsDevices: ['uverbs0'],
    });
  });

  it('fails without uverbs devices (fix: modprobe), or when they are not accessible (fix: permissions)', () => {
    const none = checkModules(fakeHost({ dirs: { '/sys/module': ['ib_core'] } }), ibverbs);
    expect(none.status).toBe('fail');
    expect(none.fix).toContain('modprobe ib_uverbs');
    const denied = checkModules(
      fakeHost({
        dirs: { '/sys/module': ['ib_uverbs', 'mlx5_ib'], '/dev/infiniband': ['uverbs0'] },
      }),
      ibverbs,
    );
    expect(denied.status).toBe('fail');
    expect(denied.data).toMatchObject({ ibUverbs: true, drivers: ['mlx5_ib'] });
    expect(denied.fix).toContain('/dev/infiniband/uverbs');
  });
});

describe('doctor: sizes', () => {
  it('parses --register sizes and prints bytes in binary units', () => {
    expect(parseSize('4096')).toBe(4096);
    expect(parseSize('64m')).toBe(64 * MiB);
    expect(parseSize('2GiB')).toBe(2 * 1024 * MiB);
    expect(parseSize('1x')).toBeUndefined();
    expect(parseSize('-5')).toBeUndefined();
    expect(formatBytes(16 * MiB)).toBe('16 MiB');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(Number.POSITIVE_INFINITY)).toBe('unlimited');
  });
});

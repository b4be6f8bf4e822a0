// `rdmajs doctor` as a user runs it, on this host (soft), with a deliberately low
// locked-memory limit set the way a shell would (`ulimit -l` before exec).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CAP_IPC_LOCK, hasCapability } from '../src/cli/doctor/check.js';

const bin = fileURLToPath(new URL('../bin/rdmajs.js', import.meta.url));

/** `ulimit`: a number sets soft and hard limit (KiB), as `ulimit -l 64` does; `-S …` only the soft one. */
function run(args: string[], ulimit?: number | string, dropIpcLock = false) {
  const cmd = [process.execPath, bin, ...args].map((a) => `'${a}'`).join(' ');
  const shell = `${ulimit === undefined ? '' : `ulimit -l ${ulimit}; `}exec ${cmd}`;
  // CAP_IPC_LOCK (root) exempts from the limit: drop it, as an unprivileged user lacks it.
  const argv = dropIpcLock
    ? ['setpriv', ['--inh-caps=-ipc_lock', '--bounding-set=-ipc_lock', 'sh', '-c', shell]]
    : ['sh', ['-c', shell]];
  const r = spawnSync(argv[0] as string, argv[1] as string[], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function json(args: string[], ulimit?: number | string, dropIpcLock = false) {
  const r = run([...args, '--json'], ulimit, dropIpcLock);
  return { code: r.code, report: JSON.parse(r.stdout) };
}

const capIpcLock = hasCapability(readFileSync('/proc/self/status', 'utf8'), CAP_IPC_LOCK);
// Without CAP_IPC_LOCK the limit applies as it is; with it, setpriv (util-linux) drops it.
const drop = capIpcLock && existsSync('/usr/bin/setpriv');
const canDrop = !capIpcLock || drop;

describe('rdmajs doctor on this host', () => {
  it('finds soft usable and proves it by registering memory and creating a QP', () => {
    const { code, report } = json(['doctor', '--provider', 'soft']);
    expect(code).toBe(0);
    expect(report).toMatchObject({ asked: 'soft', provider: 'soft', ok: true });
    const probe = report.checks.find((c: { id: string }) => c.id === 'probe');
    expect(probe).toMatchObject({
      status: 'ok',
      data: { device: 'soft0', registeredBytes: 16 << 20 },
    });
  });

  it('prints what it found and a verdict as text', () => {
    const r = run(['doctor', '--provider', 'soft', '--register', '1m']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('locked memory (ulimit -l)');
    expect(r.stdout).toContain('registered 1 MiB');
    expect(r.stdout).toContain('The soft provider can work here.');
  });

  it('a low ulimit -l is reported but does not stop soft, which pins nothing', () => {
    const { code, report } = json(['doctor', '--provider', 'soft'], 64);
    expect(code).toBe(0);
    const memlock = report.checks.find((c: { id: string }) => c.id === 'memlock');
    expect(memlock).toMatchObject({ status: 'skip', data: { softLimitBytes: 64 * 1024 } });
  });

  it.runIf(canDrop)('a low ulimit -l fails ibverbs, with the fix, and exits 1', () => {
    const { code, report } = json(['doctor', '--provider', 'ibverbs'], 64, drop);
    expect(code).toBe(1);
    expect(report.ok).toBe(false);
    const memlock = report.checks.find((c: { id: string }) => c.id === 'memlock');
    expect(memlock).toMatchObject({
      status: 'fail',
      data: { softLimitBytes: 64 * 1024, capIpcLock: false, registerBytes: 16 << 20 },
    });
    // `ulimit -l 64` lowered the hard limit too: only root or limits.conf raise it again.
    expect(memlock.fix).toContain('/etc/security/limits.conf');
    expect(memlock.fix).toContain('LimitMEMLOCK=infinity');
    const text = run(['doctor', '--provider', 'ibverbs'], 64, drop);
    expect(text.code).toBe(1);
    expect(text.stdout).toMatch(/FAIL {2}locked memory/);
    expect(text.stdout).toContain('The ibverbs provider cannot work here');
  });

  it.runIf(canDrop)('below a higher hard limit, the fix is the ulimit -l to run', () => {
    const { code, report } = json(
      ['doctor', '--provider', 'ibverbs', '--register', '1m'],
      '-S 64',
      drop,
    );
    expect(code).toBe(1);
    const memlock = report.checks.find((c: { id: string }) => c.id === 'memlock');
    expect(memlock.status).toBe('fail');
    expect(memlock.fix).toContain('ulimit -l 1024');
  });

  it('a limit large enough for what will be registered passes the memlock check', () => {
    const { report } = json(['doctor', '--provider', 'ibverbs', '--register', '32k'], 64, drop);
    const memlock = report.checks.find((c: { id: string }) => c.id === 'memlock');
    expect(memlock.status).toBe('ok');
  });

  it('bad options are usage errors: exit 2 with ERR_RDMA_INVALID_ARG', () => {
    for (const args of [
      ['doctor', '--provider', 'rocm'],
      ['doctor', '--register', '12x'],
      ['doctor', '--frobnicate'],
      ['doctor', '--provider', 'soft', '--device', 'mlx5_0'],
      ['doctor', 'extra'],
      ['bogus'],
    ]) {
      const r = run(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toContain('ERR_RDMA_INVALID_ARG');
      expect(r.stdout).toBe('');
    }
  });
});

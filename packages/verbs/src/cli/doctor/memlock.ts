// Locked memory: ibverbs pins every registered region, and the kernel counts it against
// RLIMIT_MEMLOCK (`ulimit -l`) unless the process has CAP_IPC_LOCK. The soft provider
// pins nothing.
import {
  CAP_IPC_LOCK,
  type CheckContext,
  type CheckResult,
  formatBytes,
  hasCapability,
  result,
} from './check.js';
import type { Host } from './host.js';

/** Soft and hard `Max locked memory` of /proc/self/limits, in bytes (Infinity = unlimited). */
export function readMemlock(host: Host): { soft: number; hard: number } | undefined {
  const line = /^Max locked memory\s+(\S+)\s+(\S+)/m.exec(host.read('/proc/self/limits') ?? '');
  if (!line?.[1] || !line[2]) return undefined;
  const bytes = (v: string) => (v === 'unlimited' ? Number.POSITIVE_INFINITY : Number(v));
  return { soft: bytes(line[1]), hard: bytes(line[2]) };
}

function fixFor(need: number, hard: number): string {
  const kib = Math.ceil(need / 1024);
  const raise =
    hard >= need
      ? `raise it in the shell that starts the process: \`ulimit -l ${kib}\` (or \`ulimit -l unlimited\`)`
      : `the hard limit (${formatBytes(hard)}) is lower too: set \`* - memlock unlimited\` in /etc/security/limits.conf and log in again`;
  return `${raise}; under systemd set LimitMEMLOCK=infinity, in Docker run with --ulimit memlock=-1 (or grant CAP_IPC_LOCK)`;
}

export function checkMemlock(host: Host, ctx: CheckContext): CheckResult {
  const title = 'locked memory (ulimit -l)';
  const limit = readMemlock(host);
  const capIpcLock = hasCapability(host.read('/proc/self/status'), CAP_IPC_LOCK);
  if (!limit)
    return result(
      'memlock',
      title,
      ctx.provider === 'ibverbs' ? 'warn' : 'skip',
      'cannot read /proc/self/limits',
    );
  const data = {
    softLimitBytes: Number.isFinite(limit.soft) ? limit.soft : null,
    hardLimitBytes: Number.isFinite(limit.hard) ? limit.hard : null,
    capIpcLock,
    registerBytes: ctx.registerBytes,
  };
  const found = `limit ${formatBytes(limit.soft)} (hard ${formatBytes(limit.hard)}), ${formatBytes(ctx.registerBytes)} to register${capIpcLock ? ', CAP_IPC_LOCK held (the limit does not apply)' : ''}`;
  if (ctx.provider !== 'ibverbs')
    return result('memlock', title, 'skip', `${found}; the soft provider pins no memory`, { data });
  if (capIpcLock || limit.soft >= ctx.registerBytes)
    return result('memlock', title, 'ok', found, { data });
  return result(
    'memlock',
    title,
    'fail',
    `${found}: registering more than the limit fails with ENOMEM (the limit is per process and inherited from the shell)`,
    { fix: fixFor(ctx.registerBytes, limit.hard), data },
  );
}

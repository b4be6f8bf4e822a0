// Yama ptrace scope: soft peers on one host map each other's memory with pidfd_getfd and
// copy with process_vm_readv/writev, which need ptrace-attach permission over the peer in
// both directions. Yama scope 1 allows it only towards descendants, so sibling processes
// (and a child towards its parent) are refused with EPERM at connect.
import {
  CAP_SYS_PTRACE,
  type CheckContext,
  type CheckResult,
  hasCapability,
  result,
} from './check.js';
import type { Host } from './host.js';

const PATH = '/proc/sys/kernel/yama/ptrace_scope';
const TCP_FIX =
  "or connect the peers over the soft provider's TCP link (openDevice({ link: 'tcp' }) with device.listen())";

export function checkPtrace(host: Host, ctx: CheckContext): CheckResult {
  const title = 'ptrace scope (soft peers in other processes)';
  const text = host.read(PATH);
  const scope = text === undefined ? undefined : Number(text.trim());
  const capSysPtrace = hasCapability(host.read('/proc/self/status'), CAP_SYS_PTRACE);
  const data = { yamaScope: scope ?? null, capSysPtrace };
  const status = (bad: 'fail' | 'warn') => (ctx.provider === 'soft' ? bad : 'skip');
  if (ctx.provider !== 'soft')
    return result(
      'ptrace',
      title,
      'skip',
      `${PATH} = ${scope ?? 'absent'}; only soft peers attach to each other`,
      { data },
    );
  if (scope !== undefined && !Number.isInteger(scope))
    return result('ptrace', title, 'warn', `${PATH} holds ${JSON.stringify(text)}: cannot tell`, {
      data,
    });
  if (scope === undefined)
    return result(
      'ptrace',
      title,
      'ok',
      'Yama is not enabled: same-user processes may attach to each other',
      { data },
    );
  if (scope === 0)
    return result(
      'ptrace',
      title,
      'ok',
      `${PATH} = 0: same-user processes may attach to each other`,
      { data },
    );
  if ((scope === 1 || scope === 2) && capSysPtrace)
    return result(
      'ptrace',
      title,
      ctx.provider === 'soft' ? 'warn' : 'skip',
      `${PATH} = ${scope}, allowed here by CAP_SYS_PTRACE: the peer process needs CAP_SYS_PTRACE too`,
      { fix: `sysctl -w kernel.yama.ptrace_scope=0 ${TCP_FIX}`, data },
    );
  const why =
    scope === 1
      ? "only a process's descendants may attach to it: soft peers in sibling processes fail to connect with EPERM"
      : scope === 2
        ? 'only CAP_SYS_PTRACE holders may attach: soft peers in other processes fail to connect with EPERM'
        : 'no process may attach to another: soft peers in other processes fail to connect with EPERM';
  return result(
    'ptrace',
    title,
    status('fail'),
    `${PATH} = ${scope}: ${why} (one process on its own works)`,
    {
      fix:
        scope === 3
          ? `scope 3 cannot be lowered until reboot: boot with kernel.yama.ptrace_scope=0 in /etc/sysctl.d, ${TCP_FIX}`
          : `as root: sysctl -w kernel.yama.ptrace_scope=0 (persist it in /etc/sysctl.d/), ${TCP_FIX}`,
      data,
    },
  );
}

// Kernel version and modules. Soft needs Linux ≥ 5.6 (pidfd_getfd); ibverbs needs
// ib_uverbs (the /dev/infiniband/uverbs* character devices) and an RDMA driver.
import { type CheckContext, type CheckResult, result } from './check.js';
import type { Host } from './host.js';

export function checkKernel(host: Host, ctx: CheckContext): CheckResult {
  const title = 'kernel version';
  const release = host.kernelRelease();
  const [major = 0, minor = 0] = (/^(\d+)\.(\d+)/.exec(release)?.slice(1) ?? []).map(Number);
  const data = { release };
  if (ctx.provider !== 'soft') return result('kernel', title, 'skip', `Linux ${release}`, { data });
  if (major > 5 || (major === 5 && minor >= 6))
    return result('kernel', title, 'ok', `Linux ${release} (soft needs ≥ 5.6)`, { data });
  return result('kernel', title, 'fail', `Linux ${release}: soft needs ≥ 5.6 for pidfd_getfd`, {
    fix: 'run on Linux 5.6 or newer',
    data,
  });
}

/** RDMA drivers that register ibverbs devices, by module name. */
const DRIVERS = [
  'rdma_rxe',
  'siw',
  'mlx5_ib',
  'mlx4_ib',
  'irdma',
  'bnxt_re',
  'efa',
  'hns_roce_hw_v2',
  'qedr',
  'erdma',
  'mana_ib',
  'ionic_rdma',
  'vmw_pvrdma',
  'hfi1',
  'ib_qib',
  'iw_cxgb4',
  'ocrdma',
  'mthca',
];

/** Loaded modules: /proc/modules where it exists, else /sys/module (which also lists built-in ones with parameters). */
function loadedModules(host: Host): Set<string> {
  const proc = host.read('/proc/modules');
  if (proc !== undefined)
    return new Set(
      proc
        .split('\n')
        .map((l) => l.split(' ')[0] ?? '')
        .filter(Boolean),
    );
  return new Set(host.list('/sys/module') ?? []);
}

export function checkModules(host: Host, ctx: CheckContext): CheckResult {
  const title = 'kernel modules (ib_uverbs + RDMA driver)';
  const mods = loadedModules(host);
  const drivers = DRIVERS.filter((d) => mods.has(d));
  const nodes = (host.list('/dev/infiniband') ?? []).filter((n) => n.startsWith('uverbs'));
  const usable = nodes.filter((n) => host.readWrite(`/dev/infiniband/${n}`));
  const data = {
    ibUverbs: mods.has('ib_uverbs'),
    drivers,
    uverbsDevices: nodes,
    usableUverbsDevices: usable,
  };
  const found = `ib_uverbs ${mods.has('ib_uverbs') ? 'loaded' : 'not loaded'}, drivers: ${drivers.join(', ') || 'none'}, /dev/infiniband: ${nodes.join(', ') || 'no uverbs devices'}`;
  const status = (s: 'ok' | 'warn' | 'fail') => (ctx.provider === 'ibverbs' ? s : 'skip');
  if (nodes.length === 0)
    return result('modules', title, status('fail'), found, {
      fix: mods.has('ib_uverbs')
        ? "load the NIC's RDMA driver (e.g. `modprobe mlx5_ib`), or for Soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <netdev>`"
        : "`modprobe ib_uverbs` and the NIC's RDMA driver (e.g. mlx5_ib), or for Soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <netdev>`",
      data,
    });
  if (usable.length === 0)
    return result(
      'modules',
      title,
      status('fail'),
      `${found}: none is readable and writable by this user`,
      {
        fix: "give the user access to /dev/infiniband/uverbs* (rdma-core's udev rules; usually the `rdma` group) or run as a user that has it",
        data,
      },
    );
  return result('modules', title, status('ok'), found, { data });
}

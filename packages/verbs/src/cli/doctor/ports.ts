// Ports of the ibverbs device under check: one ACTIVE, a RoCE v2 GID on Ethernet (a LID on
// InfiniBand), and the MTU it will use.
import type { DeviceInfo, PortInfo } from '../../index.js';
import { type CheckContext, type CheckResult, result } from './check.js';
import type { Host } from './host.js';

export interface PortFacts {
  /** The ibverbs device doctor looks at, or undefined when there is none. */
  device: DeviceInfo | undefined;
  /** Why the ibverbs provider has no device (ibverbsStatus().reason). */
  reason: string | undefined;
}

function activePort(device: DeviceInfo | undefined): PortInfo | undefined {
  return device?.ports.find((p) => p.state === 'ACTIVE');
}

function skipOr(ctx: CheckContext, s: 'ok' | 'warn' | 'fail') {
  return ctx.provider === 'ibverbs' ? s : 'skip';
}

export function checkActivePort(facts: PortFacts, ctx: CheckContext): CheckResult {
  const title = 'an ACTIVE port';
  const { device } = facts;
  if (!device)
    return result(
      'port',
      title,
      skipOr(ctx, 'fail'),
      `no ibverbs device (${facts.reason ?? 'none found'})`,
      {
        fix: /cannot load|lacks/.test(facts.reason ?? '')
          ? "install rdma-core's userspace: libibverbs1 and ibverbs-providers (rdma-core on RPM systems)"
          : 'see the kernel modules check; `rdmajs devices` lists what libibverbs sees',
      },
    );
  const states = device.ports.map((p) => `port ${p.port} ${p.state}`).join(', ');
  const data = {
    device: device.name,
    ports: device.ports.map((p) => ({ port: p.port, state: p.state })),
  };
  const port = activePort(device);
  if (port) return result('port', title, skipOr(ctx, 'ok'), `${device.name}: ${states}`, { data });
  const ib = device.ports.some((p) => p.linkLayer === 'InfiniBand');
  return result('port', title, skipOr(ctx, 'fail'), `${device.name}: ${states}`, {
    fix: ib
      ? 'INIT/ARMED on InfiniBand means no subnet manager: start one (opensm) on the fabric; DOWN: check the cable'
      : 'bring the network interface up (`ip link set <netdev> up`) and check the link (cable, switch port)',
    data,
  });
}

export function checkGid(facts: PortFacts, ctx: CheckContext): CheckResult {
  const title = 'a RoCE v2 GID (or a LID on InfiniBand)';
  const port = activePort(facts.device);
  if (!facts.device || !port) return result('gid', title, 'skip', 'no ACTIVE port to look at');
  const name = `${facts.device.name} port ${port.port}`;
  if (port.linkLayer === 'InfiniBand') {
    if (port.lid !== 0)
      return result('gid', title, skipOr(ctx, 'ok'), `${name}: InfiniBand, LID ${port.lid}`);
    return result('gid', title, skipOr(ctx, 'fail'), `${name}: InfiniBand without a LID`, {
      fix: 'start a subnet manager (opensm) on the fabric',
    });
  }
  const table = port.gidTable ?? [];
  const v2 = table.filter((g) => g.type === 'RoCE v2');
  const data = { gids: table };
  if (v2.length > 0) {
    const pick = v2.find((g) => g.gid.startsWith('0000:0000:0000:0000:0000:ffff:')) ?? v2[0];
    return result(
      'gid',
      title,
      skipOr(ctx, 'ok'),
      `${name}: RoCE v2 GID[${pick?.index}] ${pick?.gid}`,
      { data },
    );
  }
  return result(
    'gid',
    title,
    skipOr(ctx, table.length > 0 ? 'warn' : 'fail'),
    table.length > 0
      ? `${name}: only RoCE v1 GIDs (${table.length}): v1 is not routable across IP subnets`
      : `${name}: no GID, so no RoCE traffic`,
    {
      fix: 'give the netdev under this port an IP address (`ip addr add <addr>/<len> dev <netdev>`): the kernel adds its RoCE v2 GID',
      data,
    },
  );
}

/** The netdev under a RoCE port and its MTU, from sysfs (`gid_attrs/ndevs/<index>`). */
function netdevMtu(
  host: Host,
  device: string,
  port: PortInfo,
): { netdev: string; mtu: number } | undefined {
  for (const g of port.gidTable ?? []) {
    const netdev = host
      .read(`/sys/class/infiniband/${device}/ports/${port.port}/gid_attrs/ndevs/${g.index}`)
      ?.trim();
    if (!netdev) continue;
    const mtu = Number(host.read(`/sys/class/net/${netdev}/mtu`)?.trim());
    if (Number.isInteger(mtu)) return { netdev, mtu };
  }
  return undefined;
}

export function checkMtu(host: Host, facts: PortFacts, ctx: CheckContext): CheckResult {
  const title = 'path MTU';
  const port = activePort(facts.device);
  if (!facts.device || !port) return result('mtu', title, 'skip', 'no ACTIVE port to look at');
  const nd = port.linkLayer === 'Ethernet' ? netdevMtu(host, facts.device.name, port) : undefined;
  const data = {
    activeMtu: port.activeMtu,
    netdev: nd?.netdev ?? null,
    netdevMtu: nd?.mtu ?? null,
  };
  const found = `${facts.device.name} port ${port.port}: active MTU ${port.activeMtu} B${nd ? ` (netdev ${nd.netdev} MTU ${nd.mtu})` : ''}; a connection uses the smaller of both ends' MTU, so check the peer too`;
  if (port.activeMtu < 1024)
    return result(
      'mtu',
      title,
      skipOr(ctx, 'warn'),
      `${found}: every message is cut into more, smaller packets`,
      {
        fix: 'raise the netdev MTU (`ip link set <netdev> mtu 9000`, the same on every host and switch port): RoCE uses up to 4096 B with a netdev MTU ≥ 4200',
        data,
      },
    );
  return result('mtu', title, skipOr(ctx, 'ok'), found, { data });
}

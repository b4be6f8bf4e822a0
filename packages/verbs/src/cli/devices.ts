// `rdmajs devices`: lists devices with provider, ports and limits, like ibv_devinfo.
import { type DeviceInfo, ibverbsStatus, listDevices } from '../index.js';
import { parseOptions } from './args.js';

function describe(d: DeviceInfo): string {
  const row = (indent: number, k: string, v: unknown) =>
    `${' '.repeat(indent)}${`${k}:`.padEnd(24 - indent)}${String(v)}`;
  const lines = [`hca_id:\t${d.name}`, row(4, 'provider', d.provider), row(4, 'node_guid', d.guid)];
  for (const [k, v] of Object.entries(d.limits)) lines.push(row(4, k, v));
  for (const p of d.ports) {
    lines.push(
      row(8, 'port', p.port),
      row(12, 'state', p.state),
      row(12, 'active_mtu', p.activeMtu),
    );
    lines.push(row(12, 'link_layer', p.linkLayer), row(12, 'lid', p.lid));
    if (p.gidTable) {
      for (const g of p.gidTable)
        lines.push(row(12, `GID[${g.index}]`, g.type ? `${g.gid}, ${g.type}` : g.gid));
    } else {
      for (const [i, g] of p.gids.entries()) lines.push(row(12, `GID[${i}]`, g));
    }
  }
  return lines.join('\n');
}

/** 64-bit limits are bigints: JSON carries them as exact decimal strings. */
export function exactBigints(_key: string, v: unknown): unknown {
  return typeof v === 'bigint' ? v.toString() : v;
}

export const devicesUsage =
  'rdmajs devices [--json]   list RDMA devices with provider, ports and limits';

export function devices(args: string[]): number {
  const opts = parseOptions(args, { json: { type: 'boolean' } });
  const list = listDevices();
  const ibv = ibverbsStatus();
  if (ibv.devices.length === 0 && !opts.json)
    process.stderr.write(`(ibverbs: ${ibv.reason ?? 'no devices'})\n`);
  process.stdout.write(
    opts.json
      ? `${JSON.stringify(list, exactBigints, 2)}\n`
      : `${list.map(describe).join('\n\n')}\n`,
  );
  return 0;
}

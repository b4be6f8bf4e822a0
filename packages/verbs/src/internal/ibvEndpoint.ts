// Endpoints of the ibverbs provider: what RoCE v2 and InfiniBand need to reach a QP.
import type { Endpoint } from '../types.js';
import type { IbvRoute } from './native.js';
import { invalid } from './validate.js';

export interface IbvEndpoint extends Endpoint {
  provider: 'ibverbs';
  transport: 'roce' | 'ib';
  qpn: number;
  psn: number;
  lid: number;
  /** GID as ibv_devinfo prints it (8 groups of 4 hex digits); all zero without a GRH */
  gid: string;
  gidIndex: number;
  port: number;
  /** ibv_mtu enum of the path (1 = 256 B … 5 = 4096 B); the smaller side wins */
  mtu: number;
  /** RDMA READs this QP accepts in flight: the peer's initiator depth is capped by it */
  maxRdAtomic: number;
}

export function ibvEndpoint(route: IbvRoute, qpn: number, psn: number): IbvEndpoint {
  return {
    provider: 'ibverbs',
    transport: route.linkLayer === 'Ethernet' ? 'roce' : 'ib',
    qpn,
    psn,
    lid: route.lid,
    gid: route.gid,
    gidIndex: route.gidIndex,
    port: route.port,
    mtu: route.mtu,
    maxRdAtomic: route.maxRdAtomic,
  };
}

const GID = /^[0-9a-f]{4}(:[0-9a-f]{4}){7}$/i;

function uint(e: Record<string, unknown>, k: string, max: number): number {
  const v = e[k];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max)
    throw invalid(`remote ibverbs endpoint: ${k} must be an integer in [0, ${max}]`);
  return v;
}

/** Validates a remote ibverbs endpoint; returns it with the GID as four big-endian words. */
export function checkIbvEndpoint(remote: unknown): IbvEndpoint & { gidWords: number[] } {
  if (remote === null || typeof remote !== 'object')
    throw invalid('remote endpoint must be an object');
  const e = remote as Record<string, unknown>;
  if (e.provider !== 'ibverbs')
    throw invalid(`remote endpoint is of provider ${String(e.provider)}, this QP is ibverbs`);
  uint(e, 'qpn', 0xffffff);
  uint(e, 'psn', 0xffffff);
  uint(e, 'lid', 0xffff);
  uint(e, 'mtu', 5);
  // Optional for endpoints of older versions: 1 outstanding READ is always allowed.
  const maxRdAtomic = e.maxRdAtomic === undefined ? 1 : uint(e, 'maxRdAtomic', 255);
  if ((e.mtu as number) < 1)
    throw invalid('remote ibverbs endpoint: mtu must be 1 (256 B) … 5 (4096 B)');
  if (typeof e.gid !== 'string' || !GID.test(e.gid))
    throw invalid('remote ibverbs endpoint: gid must look like fe80:0000:…(8 groups)');
  const hex = e.gid.replaceAll(':', '');
  const gidWords = [0, 8, 16, 24].map((i) => Number.parseInt(hex.slice(i, i + 8), 16));
  return { ...(e as unknown as IbvEndpoint), maxRdAtomic: Math.max(1, maxRdAtomic), gidWords };
}

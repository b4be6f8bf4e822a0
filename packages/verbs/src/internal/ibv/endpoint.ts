// Endpoints of the ibverbs provider: what RoCE v2 and InfiniBand need to reach a QP, and
// their validation at connect (a remote endpoint is untrusted input).
import type { IbvEndpoint } from '../../types.js';
import type { IbvRoute } from '../native.js';
import { describe, invalid, isPlainObject, own } from '../validate.js';

export function endpointOf(route: IbvRoute, qpn: number, psn: number): IbvEndpoint {
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

function uint(e: object, k: string, min: number, max: number): number {
  const v = own(e, k);
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
    throw invalid(
      `remote ibverbs endpoint: ${k} must be an integer in [${min}, ${max}], got ${describe(v)}`,
    );
  return v;
}

/** A checked remote ibverbs endpoint, with the GID as four big-endian words. */
export interface CheckedIbvEndpoint {
  qpn: number;
  psn: number;
  lid: number;
  mtu: number;
  maxRdAtomic: number;
  gidWords: [number, number, number, number];
}

/** Validates a remote ibverbs endpoint (own properties only). */
export function checkIbvEndpoint(remote: unknown): CheckedIbvEndpoint {
  if (!isPlainObject(remote))
    throw invalid(`remote endpoint must be a plain object, got ${describe(remote)}`);
  if (own(remote, 'provider') !== 'ibverbs')
    throw invalid(
      `remote endpoint is of provider ${describe(own(remote, 'provider'))}, this QP is ibverbs`,
    );
  const gid = own(remote, 'gid');
  if (typeof gid !== 'string' || !GID.test(gid))
    throw invalid(
      'remote ibverbs endpoint: gid must look like fe80:0000:…(8 groups of 4 hex digits)',
    );
  const hex = gid.replaceAll(':', '');
  const word = (i: number) => Number.parseInt(hex.slice(i, i + 8), 16);
  return {
    qpn: uint(remote, 'qpn', 0, 0xffffff),
    psn: uint(remote, 'psn', 0, 0xffffff),
    lid: uint(remote, 'lid', 0, 0xffff),
    mtu: uint(remote, 'mtu', 1, 5),
    // Optional for endpoints of older versions: 1 outstanding READ is always allowed.
    maxRdAtomic: own(remote, 'maxRdAtomic') === undefined ? 1 : uint(remote, 'maxRdAtomic', 1, 255),
    gidWords: [word(0), word(8), word(16), word(24)],
  };
}

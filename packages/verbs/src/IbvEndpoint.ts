// Endpoints for peers not written with rdmajs: a C program against libibverbs exchanges
// LID, QPN, PSN and GID as text (ibv_rc_pingpong's "LID:QPN:PSN:GID"); these turn that into
// an endpoint `qp.connect()` accepts, and back.
import { isIPv6 } from 'node:net';
import { describe, invalid, isPlainObject, outOfRange, readOptions } from './internal/validate.js';
import type { IbvEndpoint } from './types.js';

/** The fields of a foreign ibverbs endpoint; what is omitted takes the usual default. */
export interface IbvEndpointFields {
  qpn: number;
  psn: number;
  /** Path MTU in bytes (256, 512, 1024, 2048, 4096) or as the ibv_mtu enum (1..5). */
  mtu: number;
  /** InfiniBand LID; 0 on RoCE. Default 0. */
  lid?: number;
  /**
   * The peer's GID: 8 colon-separated groups of 4 hex digits, 32 hex digits (the
   * libibverbs examples' wire form), or any IPv6 address ("::ffff:10.0.0.2"). Default all
   * zero (no GRH: InfiniBand within a subnet).
   */
  gid?: string;
  /** RDMA READs the peer accepts in flight as a responder (its max_dest_rd_atomic). Default 1. */
  maxRdAtomic?: number;
  /** The peer's GID index and port: informational, they do not affect the connection. */
  gidIndex?: number;
  port?: number;
}

const MTU_BYTES = [256, 512, 1024, 2048, 4096];

function mtuEnum(mtu: unknown): number {
  if (typeof mtu === 'number' && Number.isInteger(mtu)) {
    if (mtu >= 1 && mtu <= 5) return mtu;
    const i = MTU_BYTES.indexOf(mtu);
    if (i >= 0) return i + 1;
  }
  throw invalid(
    `mtu must be 256, 512, 1024, 2048 or 4096 bytes (or the ibv_mtu enum 1..5), got ${describe(mtu)}`,
  );
}

function uint(name: string, v: unknown, max: number, dflt?: number): number {
  if (v === undefined && dflt !== undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw invalid(`${name} must be an integer, got ${describe(v)}`);
  if (v < 0 || v > max) throw outOfRange(`${name} must be in [0, ${max}], got ${v}`);
  return v;
}

function hexGroups(hex32: string): string {
  return hex32.toLowerCase().replace(/(.{4})(?!$)/g, '$1:');
}

/** A GID in any accepted spelling, as 8 groups of 4 lower-case hex digits. */
export function normalizeGid(gid: string): string {
  if (/^[0-9a-f]{4}(:[0-9a-f]{4}){7}$/i.test(gid)) return gid.toLowerCase();
  if (/^[0-9a-f]{32}$/i.test(gid)) return hexGroups(gid);
  if (isIPv6(gid)) {
    let text = gid;
    const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
    if (v4) {
      const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
      text = `${text.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
    }
    const [head = '', tail] = text.split('::');
    const h = head ? head.split(':') : [];
    const t = tail === undefined ? [] : tail ? tail.split(':') : [];
    const groups =
      tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
    return groups
      .map((g) => g.padStart(4, '0'))
      .join(':')
      .toLowerCase();
  }
  throw invalid(
    `gid must be 8 groups of 4 hex digits, 32 hex digits or an IPv6 address, got ${describe(gid)}`,
  );
}

/** An endpoint for a QP that is not an rdmajs QP, from the fields its program exchanges. */
export function ibverbsEndpoint(fields: IbvEndpointFields): IbvEndpoint {
  if (!isPlainObject(fields))
    throw invalid(`ibverbsEndpoint takes an object, got ${describe(fields)}`);
  const f = readOptions('ibverbsEndpoint', fields, [
    'qpn',
    'psn',
    'mtu',
    'lid',
    'gid',
    'maxRdAtomic',
    'gidIndex',
    'port',
    'provider',
    'transport',
  ]);
  const gid = f.gid === undefined ? '0000:0000:0000:0000:0000:0000:0000:0000' : f.gid;
  if (typeof gid !== 'string') throw invalid(`gid must be a string, got ${describe(gid)}`);
  const lid = uint('lid', f.lid, 0xffff, 0);
  return {
    provider: 'ibverbs',
    transport: lid === 0 ? 'roce' : 'ib',
    qpn: uint('qpn', f.qpn, 0xffffff),
    psn: uint('psn', f.psn, 0xffffff),
    lid,
    gid: normalizeGid(gid),
    gidIndex: uint('gidIndex', f.gidIndex, 255, 0),
    port: uint('port', f.port, 255, 1),
    mtu: mtuEnum(f.mtu),
    maxRdAtomic: Math.max(1, uint('maxRdAtomic', f.maxRdAtomic, 255, 1)),
  };
}

/**
 * Parses "LID:QPN:PSN:GID" as ibv_rc_pingpong exchanges it (hex fields: `%04x:%06x:%06x:`
 * then the GID as 32 hex digits); the MTU is not part of that text, so it is an argument.
 */
export function parseIbverbsEndpoint(
  text: string,
  options: { mtu: number; maxRdAtomic?: number },
): IbvEndpoint {
  if (typeof text !== 'string')
    throw invalid(`endpoint text must be a string, got ${describe(text)}`);
  const m = /^\s*([0-9a-f]{1,4}):([0-9a-f]{1,6}):([0-9a-f]{1,6}):([0-9a-f]{32})\s*$/i.exec(text);
  if (!m)
    throw invalid(
      `endpoint text must be LID:QPN:PSN:GID in hex (ibv_rc_pingpong's form), got ${describe(text)}`,
    );
  const o = readOptions('parseIbverbsEndpoint options', options, ['mtu', 'maxRdAtomic']);
  return ibverbsEndpoint({
    lid: Number.parseInt(m[1] as string, 16),
    qpn: Number.parseInt(m[2] as string, 16),
    psn: Number.parseInt(m[3] as string, 16),
    gid: m[4] as string,
    mtu: o.mtu as number,
    ...(o.maxRdAtomic === undefined ? {} : { maxRdAtomic: o.maxRdAtomic as number }),
  });
}

/** The "LID:QPN:PSN:GID" text of an endpoint, for a libibverbs peer to parse. */
export function formatIbverbsEndpoint(ep: IbvEndpoint): string {
  const e = ibverbsEndpoint(ep);
  const hex = (v: number, w: number) => v.toString(16).padStart(w, '0');
  return `${hex(e.lid, 4)}:${hex(e.qpn, 6)}:${hex(e.psn, 6)}:${e.gid.replaceAll(':', '')}`;
}

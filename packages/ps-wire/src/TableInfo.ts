import { PsWireError } from './errors.js';
import {
  asciiBytes,
  exact,
  header,
  need,
  pad8,
  readName,
  viewOf,
  writeName,
  zero,
} from './internal/bytes.js';
import { checkDim, checkName, checkU32, checkWriter } from './internal/check.js';
import type { ResolvedInit } from './KeyInit.js';
import { DEFAULT_PS_WIRE_LIMITS, type PsWireLimits } from './Limits.js';
import {
  MAX_NAME_BYTES,
  MAX_SHARD_ID_BYTES,
  MAX_TABLE_READ_DESCRIPTOR,
  MAX_WIRE_DIM,
  NAME_PATTERN,
  PS_WIRE_VERSION,
  PsMessageKind,
  TABLE_ENTRY_FIXED,
  TABLE_INFO_REPLY_FIXED,
  TABLE_INFO_REQUEST_BYTES,
  TABLE_INIT_BYTES,
  TABLE_READ_FIXED,
  TableFlags,
  WRITER_PATTERN,
} from './Schema.js';

/** A sparse table as a client needs to know it (to refuse bad input before sending). */
export interface WireTableInfo {
  name: string;
  dim: number;
  /** The server refuses gradients with NaN or ±Inf for this table. */
  rejectNonFinite: boolean;
  /** Rows of unseen keys (the client fills a partial pull's missing rows with it). */
  init: ResolvedInit;
  /**
   * A `oneSidedRead` table's read descriptor (mux's, opaque here) for the connection that asked:
   * sent over RDMA connections only (flag `readable`). Untrusted: the client decodes it.
   */
  readDescriptor?: Uint8Array;
}

export interface WireDenseInfo {
  name: string;
  /** Element count. */
  length: number;
  rejectNonFinite: boolean;
}

/**
 * Table-info reply (little-endian):
 * ```
 * 0 version u8 | 1 kind u8 (10) | 2 reserved u16 | 4 tableCount u16 | 6 denseCount u16
 * 8 maxBatchKeys u32 | 12 shardIdLength u16 | 14 reserved u16 | 16 shard id, padded to 8
 * then per table: nameLength u16 | flags u16 | dim u32 | initKind u8 (0 zeros, 1 uniform, 2 normal)
 *   | reserved u8 | reserved u16 | seed u32 | p0 f64 (low / mean) | p1 f64 (high / std)
 *   | [flags & readable: descriptorLength u16 | reserved u16 | reserved u32 | descriptor, padded to 8]
 *   | name, padded to 8
 * then per dense tensor: nameLength u16 | flags u16 | length u32 | name, padded to 8
 * ```
 */
export interface TableInfo {
  shardId: string;
  /** The largest batch (keys) this server takes. */
  maxBatchKeys: number;
  tables: WireTableInfo[];
  dense: WireDenseInfo[];
}

export function encodeTableInfoRequest(): Uint8Array {
  const out = new Uint8Array(TABLE_INFO_REQUEST_BYTES);
  out[0] = PS_WIRE_VERSION;
  out[1] = PsMessageKind.TableInfoRequest;
  return out;
}

export function decodeTableInfoRequest(b: Uint8Array): void {
  const what = 'table-info request';
  const v = header(b, PsMessageKind.TableInfoRequest, TABLE_INFO_REQUEST_BYTES, what);
  exact(b, TABLE_INFO_REQUEST_BYTES, what);
  zero(v, 2, 2, what);
  zero(v, 4, 4, what);
}

export function encodeTableInfoReply(info: TableInfo): Uint8Array {
  const shard = asciiBytes(checkWriter(info.shardId));
  checkU32(info.maxBatchKeys, 'maxBatchKeys');
  if (
    !Array.isArray(info.tables) ||
    !Array.isArray(info.dense) ||
    info.tables.length > 0xffff ||
    info.dense.length > 0xffff
  ) {
    throw new PsWireError(
      'ERR_PS_WIRE_INVALID_ARG',
      'tables and dense must be arrays of at most 65 535',
    );
  }
  const entries = [
    ...info.tables.map((t) => ({
      name: asciiBytes(checkName(t.name, 'table')),
      n: checkDim(t.dim),
      f: t.rejectNonFinite,
      init: checkInit(t.init) as ResolvedInit | undefined,
      desc: checkDescriptor(t.readDescriptor),
    })),
    ...info.dense.map((d) => ({
      name: asciiBytes(checkName(d.name, 'dense')),
      n: checkU32(d.length, 'length'),
      f: d.rejectNonFinite,
      init: undefined as ResolvedInit | undefined,
      desc: undefined as Uint8Array | undefined,
    })),
  ];
  let total = TABLE_INFO_REPLY_FIXED + pad8(shard.length);
  for (const e of entries) {
    total +=
      TABLE_ENTRY_FIXED +
      (e.init === undefined ? 0 : TABLE_INIT_BYTES) +
      (e.desc === undefined ? 0 : TABLE_READ_FIXED + pad8(e.desc.length)) +
      pad8(e.name.length);
  }
  const out = new Uint8Array(total);
  const v = viewOf(out);
  out[0] = PS_WIRE_VERSION;
  out[1] = PsMessageKind.TableInfoReply;
  v.setUint16(4, info.tables.length, true);
  v.setUint16(6, info.dense.length, true);
  v.setUint32(8, info.maxBatchKeys, true);
  v.setUint16(12, shard.length, true);
  let at = writeName(out, TABLE_INFO_REPLY_FIXED, shard);
  for (const e of entries) {
    v.setUint16(at, e.name.length, true);
    const flags =
      (e.f ? TableFlags.rejectNonFinite : 0) | (e.desc === undefined ? 0 : TableFlags.readable);
    v.setUint16(at + 2, flags, true);
    v.setUint32(at + 4, e.n, true);
    at += TABLE_ENTRY_FIXED;
    if (e.init !== undefined) {
      writeInit(v, at, e.init);
      at += TABLE_INIT_BYTES;
    }
    if (e.desc !== undefined) {
      v.setUint16(at, e.desc.length, true);
      out.set(e.desc, at + TABLE_READ_FIXED);
      at += TABLE_READ_FIXED + pad8(e.desc.length);
    }
    at = writeName(out, at, e.name);
  }
  return out;
}

export function decodeTableInfoReply(
  b: Uint8Array,
  limits: PsWireLimits = DEFAULT_PS_WIRE_LIMITS,
): TableInfo {
  const what = 'table-info reply';
  const v = header(b, PsMessageKind.TableInfoReply, TABLE_INFO_REPLY_FIXED, what);
  zero(v, 2, 2, what);
  const nt = v.getUint16(4, true);
  const nd = v.getUint16(6, true);
  if (nt > limits.maxTables) {
    throw new PsWireError('ERR_PS_WIRE_TOO_LARGE', `${what}: ${nt} tables`, { offset: 4 });
  }
  if (nd > limits.maxTables) {
    throw new PsWireError('ERR_PS_WIRE_TOO_LARGE', `${what}: ${nd} dense tensors`, { offset: 6 });
  }
  const maxBatchKeys = v.getUint32(8, true);
  const sl = v.getUint16(12, true);
  if (sl < 1 || sl > MAX_SHARD_ID_BYTES) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: shard id length ${sl}`, { offset: 12 });
  }
  zero(v, 14, 2, what);
  need(b, TABLE_INFO_REPLY_FIXED + pad8(sl), what, b.length);
  const shardId = readName(b, TABLE_INFO_REPLY_FIXED, sl, WRITER_PATTERN, what);
  let at = TABLE_INFO_REPLY_FIXED + pad8(sl);
  const tables: WireTableInfo[] = [];
  const dense: WireDenseInfo[] = [];
  for (let i = 0; i < nt + nd; i++) {
    need(b, at + TABLE_ENTRY_FIXED, what, b.length);
    const len = v.getUint16(at, true);
    if (len < 1 || len > MAX_NAME_BYTES) {
      throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: name length ${len}`, { offset: at });
    }
    const flags = v.getUint16(at + 2, true);
    const known = TableFlags.rejectNonFinite | TableFlags.readable;
    if ((flags & ~known) !== 0 || (i >= nt && (flags & TableFlags.readable) !== 0)) {
      throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: flags ${flags}`, { offset: at + 2 });
    }
    const n = v.getUint32(at + 4, true);
    const isTable = i < nt;
    if (isTable ? n < 1 || n > MAX_WIRE_DIM : n < 1 || n > limits.maxFloats) {
      throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: ${isTable ? 'dim' : 'length'} ${n}`, {
        offset: at + 4,
      });
    }
    let nameAt = at + TABLE_ENTRY_FIXED + (isTable ? TABLE_INIT_BYTES : 0);
    let readDescriptor: Uint8Array | undefined;
    if ((flags & TableFlags.readable) !== 0) {
      need(b, nameAt + TABLE_READ_FIXED, what, b.length);
      const dl = v.getUint16(nameAt, true);
      if (dl < 1 || dl > MAX_TABLE_READ_DESCRIPTOR) {
        throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: read descriptor length ${dl}`, {
          offset: nameAt,
        });
      }
      zero(v, nameAt + 2, 2, what);
      zero(v, nameAt + 4, 4, what);
      need(b, nameAt + TABLE_READ_FIXED + pad8(dl), what, b.length);
      // A copy: the reply buffer is not the caller's to keep.
      readDescriptor = b.slice(nameAt + TABLE_READ_FIXED, nameAt + TABLE_READ_FIXED + dl);
      nameAt += TABLE_READ_FIXED + pad8(dl);
    }
    need(b, nameAt + pad8(len), what, b.length);
    const init = isTable ? readInit(v, at + TABLE_ENTRY_FIXED, what) : undefined;
    const name = readName(b, nameAt, len, NAME_PATTERN, what);
    const rejectNonFinite = (flags & TableFlags.rejectNonFinite) !== 0;
    if (init !== undefined)
      tables.push({
        name,
        dim: n,
        rejectNonFinite,
        init,
        ...(readDescriptor === undefined ? {} : { readDescriptor }),
      });
    else dense.push({ name, length: n, rejectNonFinite });
    at = nameAt + pad8(len);
  }
  exact(b, at, what);
  return { shardId, maxBatchKeys, tables, dense };
}

function checkDescriptor(d: unknown): Uint8Array | undefined {
  if (d === undefined) return undefined;
  if (!(d instanceof Uint8Array) || d.length < 1 || d.length > MAX_TABLE_READ_DESCRIPTOR)
    throw new PsWireError(
      'ERR_PS_WIRE_INVALID_ARG',
      `readDescriptor must be 1 … ${MAX_TABLE_READ_DESCRIPTOR} bytes`,
    );
  return d;
}

const INIT_KINDS = ['zeros', 'uniform', 'normal'] as const;

function checkInit(init: unknown): ResolvedInit {
  const i = init as ResolvedInit | undefined;
  const ok =
    i !== undefined &&
    i !== null &&
    (i.kind === 'zeros' ||
      (i.kind === 'uniform' &&
        Number.isInteger(i.seed) &&
        i.seed >= 0 &&
        i.seed <= 0xffff_ffff &&
        Number.isFinite(i.low) &&
        Number.isFinite(i.high) &&
        i.high > i.low) ||
      (i.kind === 'normal' &&
        Number.isInteger(i.seed) &&
        i.seed >= 0 &&
        i.seed <= 0xffff_ffff &&
        Number.isFinite(i.mean) &&
        Number.isFinite(i.std) &&
        i.std >= 0));
  if (!ok) throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'table init must be a resolved init');
  return i as ResolvedInit;
}

function writeInit(v: DataView, at: number, init: ResolvedInit): void {
  v.setUint8(at, INIT_KINDS.indexOf(init.kind));
  if (init.kind === 'zeros') return;
  v.setUint32(at + 4, init.seed, true);
  v.setFloat64(at + 8, init.kind === 'uniform' ? init.low : init.mean, true);
  v.setFloat64(at + 16, init.kind === 'uniform' ? init.high : init.std, true);
}

function readInit(v: DataView, at: number, what: string): ResolvedInit {
  const kind = INIT_KINDS[v.getUint8(at)];
  if (kind === undefined) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: init kind ${v.getUint8(at)}`, {
      offset: at,
    });
  }
  zero(v, at + 1, 1, what);
  zero(v, at + 2, 2, what);
  const seed = v.getUint32(at + 4, true);
  const p0 = v.getFloat64(at + 8, true);
  const p1 = v.getFloat64(at + 16, true);
  const field = (msg: string, offset: number): never => {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: ${msg}`, { offset });
  };
  if (kind === 'zeros') {
    if (seed !== 0 || !Object.is(p0, 0) || !Object.is(p1, 0))
      field('zeros init with parameters', at + 4);
    return { kind };
  }
  if (!Number.isFinite(p0)) field('init parameter not finite', at + 8);
  if (!Number.isFinite(p1)) field('init parameter not finite', at + 16);
  if (kind === 'uniform') {
    if (!(p1 > p0)) field('uniform init high ≤ low', at + 16);
    return { kind, seed, low: p0, high: p1 };
  }
  if (!(p1 >= 0)) field('normal init std < 0', at + 16);
  return { kind, seed, mean: p0, std: p1 };
}

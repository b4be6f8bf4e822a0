import { PsWireError } from './errors.js';
import {
  exact,
  header,
  pad8,
  readFloats,
  readKeys,
  readName,
  viewOf,
  writeFloats,
  writeKeys,
  writeName,
  zero,
} from './internal/bytes.js';
import { checkDim, checkFloats, checkKeys, checkU32, nameBytes } from './internal/check.js';
import { DEFAULT_PS_WIRE_LIMITS, type PsWireLimits } from './Limits.js';
import {
  MAX_NAME_BYTES,
  MAX_WIRE_DIM,
  NAME_PATTERN,
  PS_WIRE_VERSION,
  PsMessageKind,
  PULL_REPLY_FIXED,
  PULL_REQUEST_FIXED,
} from './Schema.js';

/**
 * Pull request (little-endian):
 * ```
 * 0 version u8 | 1 kind u8 (1) | 2 reserved u16 | 4 nameLength u16 | 6 reserved u16
 * 8 count u32 | 12 reserved u32 | 16 name, zero-padded to 8 | keys u64 × count
 * ```
 */
export interface PullRequest {
  table: string;
  keys: BigUint64Array;
}

/** Pull reply: `16 + 4·count·dim` bytes; rows in request order. */
export interface PullReply {
  dim: number;
  count: number;
  /** `count × dim` floats; a view of the input when aligned. */
  rows: Float32Array;
}

export function pullRequestLength(table: string, count: number): number {
  return PULL_REQUEST_FIXED + pad8(table.length) + 8 * count;
}

/**
 * A pull request with its fixed part and table written, and its keys as a view of `bytes`
 * (8-aligned: `bytes` is a fresh buffer) for the caller to fill — a client splitting a batch
 * over shards writes each key once, straight into the request it sends. Little-endian hosts
 * (the view is native order), as `allocatePushRequest`.
 */
export function allocatePullRequest(
  table: string,
  count: number,
): { bytes: Uint8Array; keys: BigUint64Array } {
  const out = new Uint8Array(pullRequestLength(table, count));
  const at = writePullRequestHead(out, table, count);
  return { bytes: out, keys: new BigUint64Array(out.buffer, at, count) };
}

/**
 * Writes a pull request's fixed part and table at the start of `out` (which must hold at
 * least `pullRequestLength(table, count)` bytes; its first `pullRequestLength` bytes are the
 * request once the keys are in); returns the byte offset of the keys in `out`. For a client
 * that reuses its request buffers from pull to pull: no allocation per request.
 */
export function writePullRequestHead(out: Uint8Array, table: string, count: number): number {
  const name = nameBytes(table, 'table');
  checkU32(count, 'count');
  const total = pullRequestLength(table, count);
  if (!(out instanceof Uint8Array) || out.length < total) {
    throw new PsWireError(
      'ERR_PS_WIRE_INVALID_ARG',
      `a pull request of ${count} keys needs ${total} bytes`,
    );
  }
  // Byte by byte, little-endian: no DataView per request.
  out[0] = PS_WIRE_VERSION;
  out[1] = PsMessageKind.PullRequest;
  out[2] = 0;
  out[3] = 0;
  out[4] = name.length & 0xff;
  out[5] = name.length >>> 8;
  out[6] = 0;
  out[7] = 0;
  out[8] = count & 0xff;
  out[9] = (count >>> 8) & 0xff;
  out[10] = (count >>> 16) & 0xff;
  out[11] = count >>> 24;
  out.fill(0, 12, 16);
  const at = writeName(out, PULL_REQUEST_FIXED, name);
  // A reused buffer: the name's padding must be zero again (the decoder checks it).
  out.fill(0, PULL_REQUEST_FIXED + name.length, at);
  return at;
}

export function encodePullRequest(req: PullRequest): Uint8Array {
  const keys = checkKeys(req.keys);
  const { bytes, keys: keysAt } = allocatePullRequest(req.table, keys.length);
  writeKeys(bytes, keysAt.byteOffset, keys);
  return bytes;
}

export function decodePullRequest(
  b: Uint8Array,
  limits: PsWireLimits = DEFAULT_PS_WIRE_LIMITS,
): PullRequest {
  const what = 'pull request';
  const v = header(b, PsMessageKind.PullRequest, PULL_REQUEST_FIXED, what);
  zero(v, 2, 2, what);
  const nameLen = v.getUint16(4, true);
  if (nameLen < 1 || nameLen > MAX_NAME_BYTES) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: name length ${nameLen}`, { offset: 4 });
  }
  zero(v, 6, 2, what);
  const count = v.getUint32(8, true);
  if (count > limits.maxKeys) {
    throw new PsWireError('ERR_PS_WIRE_TOO_LARGE', `${what}: ${count} keys > ${limits.maxKeys}`, {
      offset: 8,
    });
  }
  zero(v, 12, 4, what);
  const keysAt = PULL_REQUEST_FIXED + pad8(nameLen);
  exact(b, keysAt + 8 * count, what);
  const table = readName(b, PULL_REQUEST_FIXED, nameLen, NAME_PATTERN, what);
  return { table, keys: readKeys(b, keysAt, count) };
}

export function pullReplyLength(count: number, dim: number): number {
  return PULL_REPLY_FIXED + 4 * count * dim;
}

/**
 * A pull reply whose rows the caller fills in place (the server gathers straight into
 * `rows`, a view of `bytes`): no second copy.
 */
export function allocatePullReply(
  count: number,
  dim: number,
): { bytes: Uint8Array; rows: Float32Array } {
  checkU32(count, 'count');
  checkDim(dim);
  const bytes = new Uint8Array(pullReplyLength(count, dim));
  const v = viewOf(bytes);
  bytes[0] = PS_WIRE_VERSION;
  bytes[1] = PsMessageKind.PullReply;
  v.setUint32(4, dim, true);
  v.setUint32(8, count, true);
  return { bytes, rows: new Float32Array(bytes.buffer, PULL_REPLY_FIXED, count * dim) };
}

/**
 * Writes a pull reply's fixed part into `bytes` (exactly `pullReplyLength(count, dim)`
 * bytes, 4-aligned, e.g. a registered reply block) and returns its rows as a view for the
 * server to gather into: the reply is built where it is sent from.
 */
export function pullReplyInto(bytes: Uint8Array, count: number, dim: number): Float32Array {
  checkU32(count, 'count');
  checkDim(dim);
  if (!(bytes instanceof Uint8Array) || bytes.length !== pullReplyLength(count, dim)) {
    throw new PsWireError(
      'ERR_PS_WIRE_INVALID_ARG',
      `a pull reply of ${count} × ${dim} needs exactly ${pullReplyLength(count, dim)} bytes`,
    );
  }
  if ((bytes.byteOffset + PULL_REPLY_FIXED) % 4 !== 0) {
    throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'pull reply bytes must be 4-aligned');
  }
  bytes.fill(0, 0, PULL_REPLY_FIXED);
  const v = viewOf(bytes);
  bytes[0] = PS_WIRE_VERSION;
  bytes[1] = PsMessageKind.PullReply;
  v.setUint32(4, dim, true);
  v.setUint32(8, count, true);
  return new Float32Array(bytes.buffer, bytes.byteOffset + PULL_REPLY_FIXED, count * dim);
}

export function encodePullReply(reply: { dim: number; rows: Float32Array }): Uint8Array {
  const dim = checkDim(reply.dim);
  const rows = checkFloats(reply.rows, 'rows');
  if (rows.length % dim !== 0) {
    throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'rows.length must be a multiple of dim');
  }
  const { bytes } = allocatePullReply(rows.length / dim, dim);
  writeFloats(bytes, PULL_REPLY_FIXED, rows);
  return bytes;
}

export function decodePullReply(
  b: Uint8Array,
  limits: PsWireLimits = DEFAULT_PS_WIRE_LIMITS,
): PullReply {
  const what = 'pull reply';
  const v = header(b, PsMessageKind.PullReply, PULL_REPLY_FIXED, what);
  zero(v, 2, 2, what);
  const dim = v.getUint32(4, true);
  if (dim < 1 || dim > MAX_WIRE_DIM) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: dim ${dim}`, { offset: 4 });
  }
  const count = v.getUint32(8, true);
  if (count > limits.maxKeys) {
    throw new PsWireError('ERR_PS_WIRE_TOO_LARGE', `${what}: ${count} rows > ${limits.maxKeys}`, {
      offset: 8,
    });
  }
  if (count * dim > limits.maxFloats) {
    throw new PsWireError(
      'ERR_PS_WIRE_TOO_LARGE',
      `${what}: ${count * dim} floats > ${limits.maxFloats}`,
      {
        offset: 8,
      },
    );
  }
  zero(v, 12, 4, what);
  exact(b, pullReplyLength(count, dim), what);
  return { dim, count, rows: readFloats(b, PULL_REPLY_FIXED, count * dim) };
}

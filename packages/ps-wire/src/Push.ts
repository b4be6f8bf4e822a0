import { PsWireError } from './errors.js';
import {
  exact,
  header,
  pad8,
  readFloats,
  readKeys,
  readName,
  readSeq,
  viewOf,
  writeFloats,
  writeKeys,
  writeName,
  zero,
} from './internal/bytes.js';
import {
  checkDim,
  checkFloats,
  checkKeys,
  checkSeq,
  checkU32,
  nameBytes,
  writerBytes,
} from './internal/check.js';
import { DEFAULT_PS_WIRE_LIMITS, type PsWireLimits } from './Limits.js';
import {
  MAX_NAME_BYTES,
  MAX_WIRE_DIM,
  MAX_WRITER_BYTES,
  NAME_PATTERN,
  PS_WIRE_VERSION,
  PsMessageKind,
  PUSH_REPLY_BYTES,
  PUSH_REQUEST_FIXED,
  PushReplyFlags,
  WRITER_PATTERN,
} from './Schema.js';

/**
 * Push request (little-endian):
 * ```
 * 0 version u8 | 1 kind u8 (3) | 2 reserved u16 | 4 nameLength u16 | 6 writerLength u16
 * 8 count u32 | 12 dim u32 | 16 seq u64 (≤ 2^53 − 1)
 * 24 name, zero-padded to 8 | writer, zero-padded to 8 | keys u64 × count | grads f32 × count·dim
 * ```
 * (writer, seq) is the store's de-duplication key: a seq at or below the writer's last
 * applied one is acknowledged, not applied again (exactly-once across server restarts).
 */
export interface PushRequest {
  table: string;
  writer: string;
  seq: number;
  dim: number;
  keys: BigUint64Array;
  /** `keys.length × dim` floats. */
  grads: Float32Array;
}

/** Push (and dense push) reply: 16 bytes. */
export interface PushReply {
  applied: boolean;
  duplicate: boolean;
  /** Distinct rows updated. */
  rows: number;
  /** Keys not applied (unadmitted, or beyond the row limit). */
  dropped: number;
}

export function pushRequestLength(
  table: string,
  writer: string,
  count: number,
  dim: number,
): number {
  return (
    PUSH_REQUEST_FIXED + pad8(table.length) + pad8(writer.length) + 8 * count + 4 * count * dim
  );
}

/** The fixed fields of a push request whose keys and gradients the caller writes in place. */
export interface PushRequestHeader {
  table: string;
  writer: string;
  seq: number;
  dim: number;
  /** Keys (rows) the request carries. */
  count: number;
}

/**
 * A push request with its fixed part, table and writer written, and its keys and gradients
 * as views of `bytes` (8- and 4-aligned: `bytes` is a fresh buffer) for the caller to fill —
 * a client splitting a batch over shards writes each key and row once, straight into the
 * request it sends. Little-endian hosts (the views are native order), as `allocatePullReply`.
 */
export function allocatePushRequest(h: PushRequestHeader): {
  bytes: Uint8Array;
  keys: BigUint64Array;
  grads: Float32Array;
} {
  const out = new Uint8Array(checkedPushHead(h).total); // checked before it is allocated
  const at = writePushRequestHead(out, h);
  return {
    bytes: out,
    keys: new BigUint64Array(out.buffer, at, h.count),
    grads: new Float32Array(out.buffer, at + 8 * h.count, h.count * h.dim),
  };
}

/** A push request header's fields, each checked, and the request's length. */
function checkedPushHead(h: PushRequestHeader) {
  const name = nameBytes(h.table, 'table');
  const writer = writerBytes(h.writer);
  const seq = checkSeq(h.seq);
  const dim = checkDim(h.dim);
  const count = checkU32(h.count, 'count');
  return { name, writer, seq, dim, count, total: pushRequestLength(h.table, h.writer, count, dim) };
}

/**
 * Writes a push request's fixed part, table and writer into `out` (exactly
 * `pushRequestLength` bytes, 8-aligned) and returns the byte offset of its keys in `out`
 * (its gradients follow them): for a client that reuses its request buffers once a push was
 * acknowledged — no allocation per request. Little-endian hosts, as `allocatePushRequest`.
 */
export function writePushRequestHead(out: Uint8Array, h: PushRequestHeader): number {
  const { name, writer, seq, dim, count, total } = checkedPushHead(h);
  if (!(out instanceof Uint8Array) || out.length !== total || out.byteOffset % 8 !== 0) {
    throw new PsWireError(
      'ERR_PS_WIRE_INVALID_ARG',
      `a push request of ${count} × ${dim} needs exactly ${total} 8-aligned bytes`,
    );
  }
  const v = viewOf(out);
  out[0] = PS_WIRE_VERSION;
  out[1] = PsMessageKind.PushRequest;
  v.setUint16(2, 0, true); // a reused buffer: the reserved field must be zero again
  v.setUint16(4, name.length, true);
  v.setUint16(6, writer.length, true);
  v.setUint32(8, count, true);
  v.setUint32(12, dim, true);
  v.setBigUint64(16, BigInt(seq), true);
  let at = writeName(out, PUSH_REQUEST_FIXED, name);
  // The names' zero padding, written again in a reused buffer (the decoder checks it).
  out.fill(0, PUSH_REQUEST_FIXED + name.length, at);
  const end = writeName(out, at, writer);
  out.fill(0, at + writer.length, end);
  at = end;
  return at;
}

export function encodePushRequest(req: PushRequest): Uint8Array {
  const keys = checkKeys(req.keys);
  const grads = checkFloats(req.grads, 'grads');
  checkU32(keys.length, 'keys.length');
  if (grads.length !== keys.length * checkDim(req.dim)) {
    throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'grads.length must be keys.length × dim');
  }
  const { bytes, keys: keysAt } = allocatePushRequest({
    table: req.table,
    writer: req.writer,
    seq: req.seq,
    dim: req.dim,
    count: keys.length,
  });
  const at = keysAt.byteOffset;
  writeKeys(bytes, at, keys);
  writeFloats(bytes, at + 8 * keys.length, grads);
  return bytes;
}

export function decodePushRequest(
  b: Uint8Array,
  limits: PsWireLimits = DEFAULT_PS_WIRE_LIMITS,
): PushRequest {
  const what = 'push request';
  const v = header(b, PsMessageKind.PushRequest, PUSH_REQUEST_FIXED, what);
  zero(v, 2, 2, what);
  const nameLen = v.getUint16(4, true);
  if (nameLen < 1 || nameLen > MAX_NAME_BYTES) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: name length ${nameLen}`, { offset: 4 });
  }
  const writerLen = v.getUint16(6, true);
  if (writerLen < 1 || writerLen > MAX_WRITER_BYTES) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: writer length ${writerLen}`, {
      offset: 6,
    });
  }
  const count = v.getUint32(8, true);
  // A push of no keys applies nothing, yet would take (or advance) a writer slot in the store.
  if (count === 0) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: no keys`, { offset: 8 });
  }
  if (count > limits.maxKeys) {
    throw new PsWireError('ERR_PS_WIRE_TOO_LARGE', `${what}: ${count} keys > ${limits.maxKeys}`, {
      offset: 8,
    });
  }
  const dim = v.getUint32(12, true);
  if (dim < 1 || dim > MAX_WIRE_DIM) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: dim ${dim}`, { offset: 12 });
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
  const seq = readSeq(v, 16, what);
  const writerAt = PUSH_REQUEST_FIXED + pad8(nameLen);
  const keysAt = writerAt + pad8(writerLen);
  const gradsAt = keysAt + 8 * count;
  exact(b, gradsAt + 4 * count * dim, what);
  const table = readName(b, PUSH_REQUEST_FIXED, nameLen, NAME_PATTERN, what);
  const writer = readName(b, writerAt, writerLen, WRITER_PATTERN, what);
  return {
    table,
    writer,
    seq,
    dim,
    keys: readKeys(b, keysAt, count),
    grads: readFloats(b, gradsAt, count * dim),
  };
}

/** Encodes a push reply; `kind` is PushReply or PushDenseReply. */
export function encodePushReply(
  reply: PushReply,
  kind:
    | typeof PsMessageKind.PushReply
    | typeof PsMessageKind.PushDenseReply = PsMessageKind.PushReply,
): Uint8Array {
  const rows = checkU32(reply.rows, 'rows');
  const dropped = checkU32(reply.dropped, 'dropped');
  // Written byte by byte: a DataView would give these 16 bytes an ArrayBuffer backing store of
  // their own (a malloc and external memory per push in the shard); without one they stay a
  // small array in the V8 heap.
  const out = new Uint8Array(PUSH_REPLY_BYTES);
  out[0] = PS_WIRE_VERSION;
  out[1] = kind;
  out[2] =
    (reply.applied ? PushReplyFlags.applied : 0) | (reply.duplicate ? PushReplyFlags.duplicate : 0);
  out[4] = rows & 0xff;
  out[5] = (rows >>> 8) & 0xff;
  out[6] = (rows >>> 16) & 0xff;
  out[7] = rows >>> 24;
  out[8] = dropped & 0xff;
  out[9] = (dropped >>> 8) & 0xff;
  out[10] = (dropped >>> 16) & 0xff;
  out[11] = dropped >>> 24;
  return out;
}

export function decodePushReply(
  b: Uint8Array,
  kind:
    | typeof PsMessageKind.PushReply
    | typeof PsMessageKind.PushDenseReply = PsMessageKind.PushReply,
): PushReply {
  const what = kind === PsMessageKind.PushReply ? 'push reply' : 'dense push reply';
  const v = header(b, kind, PUSH_REPLY_BYTES, what);
  exact(b, PUSH_REPLY_BYTES, what);
  const flags = v.getUint16(2, true);
  if ((flags & ~3) !== 0 || flags === 3) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: flags ${flags}`, { offset: 2 });
  }
  zero(v, 12, 4, what);
  return {
    applied: (flags & PushReplyFlags.applied) !== 0,
    duplicate: (flags & PushReplyFlags.duplicate) !== 0,
    rows: v.getUint32(4, true),
    dropped: v.getUint32(8, true),
  };
}

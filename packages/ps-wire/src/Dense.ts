import { PsWireError } from './errors.js';
import {
  exact,
  header,
  pad8,
  readFloats,
  readName,
  readSeq,
  viewOf,
  writeFloats,
  writeName,
  zero,
} from './internal/bytes.js';
import { checkFloats, checkSeq, nameBytes, writerBytes } from './internal/check.js';
import { DEFAULT_PS_WIRE_LIMITS, type PsWireLimits } from './Limits.js';
import {
  MAX_NAME_BYTES,
  MAX_WRITER_BYTES,
  NAME_PATTERN,
  PS_WIRE_VERSION,
  PsMessageKind,
  PULL_DENSE_REPLY_FIXED,
  PULL_DENSE_REQUEST_FIXED,
  PUSH_DENSE_REQUEST_FIXED,
  WRITER_PATTERN,
} from './Schema.js';

/**
 * Dense pull request: `0 version | 1 kind (5) | 2 reserved u16 | 4 nameLength u16 |
 * 6 reserved u16 | 8 name, zero-padded to 8`.
 * Dense pull reply: `0 version | 1 kind (6) | 2 reserved u16 | 4 count u32 | 8 values f32 × count`.
 * Dense push request: `0 version | 1 kind (7) | 2 reserved u16 | 4 nameLength u16 |
 * 6 writerLength u16 | 8 count u32 | 12 reserved u32 | 16 seq u64 | 24 name, padded |
 * writer, padded | grads f32 × count`. Reply: a push reply of kind 8.
 */
export interface PullDenseRequest {
  name: string;
}

export interface PushDenseRequest {
  name: string;
  writer: string;
  seq: number;
  grads: Float32Array;
}

function nameLength(v: DataView, what: string): number {
  const n = v.getUint16(4, true);
  if (n < 1 || n > MAX_NAME_BYTES) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: name length ${n}`, { offset: 4 });
  }
  return n;
}

function floatCount(v: DataView, offset: number, limits: PsWireLimits, what: string): number {
  const count = v.getUint32(offset, true);
  if (count > limits.maxFloats) {
    throw new PsWireError(
      'ERR_PS_WIRE_TOO_LARGE',
      `${what}: ${count} floats > ${limits.maxFloats}`,
      {
        offset,
      },
    );
  }
  return count;
}

export function encodePullDenseRequest(req: PullDenseRequest): Uint8Array {
  const name = nameBytes(req.name);
  const out = new Uint8Array(PULL_DENSE_REQUEST_FIXED + pad8(name.length));
  out[0] = PS_WIRE_VERSION;
  out[1] = PsMessageKind.PullDenseRequest;
  viewOf(out).setUint16(4, name.length, true);
  writeName(out, PULL_DENSE_REQUEST_FIXED, name);
  return out;
}

export function decodePullDenseRequest(b: Uint8Array): PullDenseRequest {
  const what = 'dense pull request';
  const v = header(b, PsMessageKind.PullDenseRequest, PULL_DENSE_REQUEST_FIXED, what);
  zero(v, 2, 2, what);
  const n = nameLength(v, what);
  zero(v, 6, 2, what);
  exact(b, PULL_DENSE_REQUEST_FIXED + pad8(n), what);
  return { name: readName(b, PULL_DENSE_REQUEST_FIXED, n, NAME_PATTERN, what) };
}

export function pullDenseReplyLength(count: number): number {
  return PULL_DENSE_REPLY_FIXED + 4 * count;
}

/** A dense pull reply whose values the caller fills in place. */
export function allocatePullDenseReply(count: number): { bytes: Uint8Array; values: Float32Array } {
  const bytes = new Uint8Array(pullDenseReplyLength(count));
  bytes[0] = PS_WIRE_VERSION;
  bytes[1] = PsMessageKind.PullDenseReply;
  viewOf(bytes).setUint32(4, count, true);
  return { bytes, values: new Float32Array(bytes.buffer, PULL_DENSE_REPLY_FIXED, count) };
}

/** As `pullReplyInto`, for a dense pull reply of `count` values. */
export function pullDenseReplyInto(bytes: Uint8Array, count: number): Float32Array {
  if (!(bytes instanceof Uint8Array) || bytes.length !== pullDenseReplyLength(count)) {
    throw new PsWireError(
      'ERR_PS_WIRE_INVALID_ARG',
      `a dense pull reply of ${count} values needs exactly ${pullDenseReplyLength(count)} bytes`,
    );
  }
  if ((bytes.byteOffset + PULL_DENSE_REPLY_FIXED) % 4 !== 0) {
    throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', 'dense pull reply bytes must be 4-aligned');
  }
  bytes.fill(0, 0, PULL_DENSE_REPLY_FIXED);
  bytes[0] = PS_WIRE_VERSION;
  bytes[1] = PsMessageKind.PullDenseReply;
  viewOf(bytes).setUint32(4, count, true);
  return new Float32Array(bytes.buffer, bytes.byteOffset + PULL_DENSE_REPLY_FIXED, count);
}

export function encodePullDenseReply(values: Float32Array): Uint8Array {
  const f = checkFloats(values, 'values');
  const { bytes } = allocatePullDenseReply(f.length);
  writeFloats(bytes, PULL_DENSE_REPLY_FIXED, f);
  return bytes;
}

export function decodePullDenseReply(
  b: Uint8Array,
  limits: PsWireLimits = DEFAULT_PS_WIRE_LIMITS,
): Float32Array {
  const what = 'dense pull reply';
  const v = header(b, PsMessageKind.PullDenseReply, PULL_DENSE_REPLY_FIXED, what);
  zero(v, 2, 2, what);
  const count = floatCount(v, 4, limits, what);
  exact(b, pullDenseReplyLength(count), what);
  return readFloats(b, PULL_DENSE_REPLY_FIXED, count);
}

/** Bytes of a dense push request of `count` floats (names as `encodePushDenseRequest` takes them). */
export function pushDenseRequestLength(name: string, writer: string, count: number): number {
  return PUSH_DENSE_REQUEST_FIXED + pad8(name.length) + pad8(writer.length) + 4 * count;
}

export function encodePushDenseRequest(req: PushDenseRequest): Uint8Array {
  // Checked before the buffer is sized from them.
  nameBytes(req.name);
  writerBytes(req.writer);
  const grads = checkFloats(req.grads, 'grads');
  const out = new Uint8Array(pushDenseRequestLength(req.name, req.writer, grads.length));
  encodePushDenseRequestInto(out, req);
  return out;
}

/**
 * Writes a dense push request into `out` (exactly `pushDenseRequestLength` bytes, e.g. a
 * registered block the client sends as it is): every byte is written, reserved fields and
 * padding included, so `out` may hold an earlier request.
 */
export function encodePushDenseRequestInto(out: Uint8Array, req: PushDenseRequest): void {
  const name = nameBytes(req.name);
  const writer = writerBytes(req.writer);
  const seq = checkSeq(req.seq);
  const grads = checkFloats(req.grads, 'grads');
  const gradsAt = PUSH_DENSE_REQUEST_FIXED + pad8(name.length) + pad8(writer.length);
  if (!(out instanceof Uint8Array) || out.length !== gradsAt + 4 * grads.length) {
    throw new PsWireError(
      'ERR_PS_WIRE_INVALID_ARG',
      `a dense push request of ${grads.length} floats needs exactly ${gradsAt + 4 * grads.length} bytes`,
    );
  }
  out.fill(0, 0, gradsAt);
  const v = viewOf(out);
  out[0] = PS_WIRE_VERSION;
  out[1] = PsMessageKind.PushDenseRequest;
  v.setUint16(4, name.length, true);
  v.setUint16(6, writer.length, true);
  v.setUint32(8, grads.length, true);
  v.setBigUint64(16, BigInt(seq), true);
  const at = writeName(out, PUSH_DENSE_REQUEST_FIXED, name);
  writeName(out, at, writer);
  writeFloats(out, gradsAt, grads);
}

export function decodePushDenseRequest(
  b: Uint8Array,
  limits: PsWireLimits = DEFAULT_PS_WIRE_LIMITS,
): PushDenseRequest {
  const what = 'dense push request';
  const v = header(b, PsMessageKind.PushDenseRequest, PUSH_DENSE_REQUEST_FIXED, what);
  zero(v, 2, 2, what);
  const n = nameLength(v, what);
  const w = v.getUint16(6, true);
  if (w < 1 || w > MAX_WRITER_BYTES) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: writer length ${w}`, { offset: 6 });
  }
  const count = floatCount(v, 8, limits, what);
  zero(v, 12, 4, what);
  const seq = readSeq(v, 16, what);
  const writerAt = PUSH_DENSE_REQUEST_FIXED + pad8(n);
  const gradsAt = writerAt + pad8(w);
  exact(b, gradsAt + 4 * count, what);
  return {
    name: readName(b, PUSH_DENSE_REQUEST_FIXED, n, NAME_PATTERN, what),
    writer: readName(b, writerAt, w, WRITER_PATTERN, what),
    seq,
    grads: readFloats(b, gradsAt, count),
  };
}

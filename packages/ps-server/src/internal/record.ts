// Push-log record framing. A record is a 16-byte header — magic, body length, CRC-32C of
// those 8 bytes, CRC-32C of the body — and the body. The header CRC makes a flipped length
// detectable instead of looking like a torn write.
import { crc32cRange } from './crc32c.js';

export const RECORD_MAGIC = 0x47_4c_53_50; // "PSLG" little-endian
export const RECORD_HEADER = 16;
export const MAX_RECORD_BODY = 1 << 30;

export const KIND_SPARSE = 1;
export const KIND_DENSE = 2;

export interface PushRecord {
  lsn: number;
  nowMs: number;
  seq: number;
  kind: typeof KIND_SPARSE | typeof KIND_DENSE;
  session: string;
  name: string;
  /** Sparse: key lo/hi pairs. Dense: empty. */
  keys: Uint32Array;
  grads: Float32Array;
}

const dec = new TextDecoder('utf-8', { fatal: true });

/** Body layout: lsn f64, nowMs f64, seq f64, kind u8, 0 u8, sessionLen u16, nameLen u16,
 * 0 u16, count u32, 0 u32, session, name, zero pad to 8, keys (8·count), grads (4·len). */
const BODY_FIXED = 40;

/** Bytes of a whole record (header + body) for these strings and arrays. */
export function recordBytes(
  session: string,
  name: string,
  keys: Uint32Array,
  grads: Float32Array,
): number {
  const strs = Buffer.byteLength(session, 'utf8') + Buffer.byteLength(name, 'utf8');
  return (
    RECORD_HEADER + BODY_FIXED + strs + ((8 - (strs % 8)) % 8) + keys.byteLength + grads.byteLength
  );
}

/**
 * Encodes a record into `dst` at `o` (room for `recordBytes(...)` bytes, which it returns):
 * no allocation but two byte views of the arrays; the body CRC runs in the kernels addon when
 * it loads. `dst` may be unzeroed (reserved fields and padding are written).
 */
export function encodeRecordInto(
  dst: Buffer,
  o: number,
  lsn: number,
  nowMs: number,
  seq: number,
  kind: typeof KIND_SPARSE | typeof KIND_DENSE,
  session: string,
  name: string,
  keys: Uint32Array,
  grads: Float32Array,
): number {
  const b = o + RECORD_HEADER;
  dst.fill(0, b + 24, b + BODY_FIXED);
  dst.writeDoubleLE(lsn, b);
  dst.writeDoubleLE(nowMs, b + 8);
  dst.writeDoubleLE(seq, b + 16);
  dst[b + 24] = kind;
  const sl = dst.write(session, b + BODY_FIXED, 'utf8');
  const nl = dst.write(name, b + BODY_FIXED + sl, 'utf8');
  dst.writeUInt16LE(sl, b + 26);
  dst.writeUInt16LE(nl, b + 28);
  dst.writeUInt32LE(keys.length / 2, b + 32);
  const strs = sl + nl;
  const pad = (8 - (strs % 8)) % 8;
  let p = b + BODY_FIXED + strs;
  dst.fill(0, p, p + pad);
  p += pad;
  dst.set(new Uint8Array(keys.buffer, keys.byteOffset, keys.byteLength), p);
  p += keys.byteLength;
  dst.set(new Uint8Array(grads.buffer, grads.byteOffset, grads.byteLength), p);
  p += grads.byteLength;
  dst.writeUInt32LE(RECORD_MAGIC, o);
  dst.writeUInt32LE(p - b, o + 4);
  dst.writeUInt32LE(crc32cRange(dst, o, o + 8), o + 8);
  dst.writeUInt32LE(crc32cRange(dst, b, p), o + 12);
  return p - o;
}

/** Decodes a body whose CRC already matched; returns a reason string if it is malformed. */
export function decodeBody(body: Uint8Array): PushRecord | string {
  if (body.length < 40) return 'record body shorter than 40 bytes';
  const dv = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const lsn = dv.getFloat64(0, true);
  const nowMs = dv.getFloat64(8, true);
  const seq = dv.getFloat64(16, true);
  const kind = dv.getUint8(24);
  const sl = dv.getUint16(26, true);
  const nl = dv.getUint16(28, true);
  const count = dv.getUint32(32, true);
  if (kind !== KIND_SPARSE && kind !== KIND_DENSE) return `unknown record kind ${kind}`;
  if (!Number.isSafeInteger(lsn) || lsn < 1 || !Number.isSafeInteger(seq) || seq < 0)
    return 'bad lsn or seq';
  const strs = sl + nl;
  const pad = (8 - (strs % 8)) % 8;
  const keyBytes = kind === KIND_SPARSE ? count * 8 : 0;
  const gradBytes = body.length - 40 - strs - pad - keyBytes;
  if (gradBytes < 0 || gradBytes % 4 !== 0) return 'record lengths disagree';
  let session: string;
  let name: string;
  try {
    session = dec.decode(body.subarray(40, 40 + sl));
    name = dec.decode(body.subarray(40 + sl, 40 + strs));
  } catch {
    return 'record strings are not UTF-8';
  }
  const o = 40 + strs + pad;
  // Copies (new Uint8Array(view) copies; Buffer#slice would not): file data is unaligned.
  const keys = new Uint32Array(new Uint8Array(body.subarray(o, o + keyBytes)).buffer);
  const grads = new Float32Array(new Uint8Array(body.subarray(o + keyBytes)).buffer);
  return { lsn, nowMs, seq, kind, session, name, keys, grads };
}

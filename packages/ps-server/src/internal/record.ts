// Push-log record framing. A record is a 16-byte header — magic, body length, CRC-32C of
// those 8 bytes, CRC-32C of the body — and the body. The header CRC makes a flipped length
// detectable instead of looking like a torn write.
import { crc32c } from './crc32c.js';

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

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

/** Body layout: lsn f64, nowMs f64, seq f64, kind u8, 0 u8, sessionLen u16, nameLen u16,
 * 0 u16, count u32, 0 u32, session, name, zero pad to 8, keys (8·count), grads (4·len). */
export function encodeRecord(r: PushRecord): Uint8Array {
  const s = enc.encode(r.session);
  const nm = enc.encode(r.name);
  const strs = s.length + nm.length;
  const pad = (8 - (strs % 8)) % 8;
  const count = r.keys.length / 2;
  const bodyLen = 40 + strs + pad + r.keys.byteLength + r.grads.byteLength;
  const out = new Uint8Array(RECORD_HEADER + bodyLen);
  const dv = new DataView(out.buffer);
  let o = RECORD_HEADER;
  dv.setFloat64(o, r.lsn, true);
  dv.setFloat64(o + 8, r.nowMs, true);
  dv.setFloat64(o + 16, r.seq, true);
  dv.setUint8(o + 24, r.kind);
  dv.setUint16(o + 26, s.length, true);
  dv.setUint16(o + 28, nm.length, true);
  dv.setUint32(o + 32, count, true);
  o += 40;
  out.set(s, o);
  out.set(nm, o + s.length);
  o += strs + pad;
  out.set(new Uint8Array(r.keys.buffer, r.keys.byteOffset, r.keys.byteLength), o);
  o += r.keys.byteLength;
  out.set(new Uint8Array(r.grads.buffer, r.grads.byteOffset, r.grads.byteLength), o);
  dv.setUint32(0, RECORD_MAGIC, true);
  dv.setUint32(4, bodyLen, true);
  dv.setUint32(8, crc32c(out.subarray(0, 8)), true);
  dv.setUint32(12, crc32c(out.subarray(RECORD_HEADER)), true);
  return out;
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

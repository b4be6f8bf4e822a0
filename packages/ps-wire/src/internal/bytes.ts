import { PsWireError } from '../errors.js';
import { PS_WIRE_VERSION } from '../Schema.js';
import { nameCacheOf } from './NameCache.js';

export const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export const pad8 = (n: number): number => (n + 7) & ~7;

export const viewOf = (b: Uint8Array): DataView =>
  new DataView(b.buffer, b.byteOffset, b.byteLength);

const encoder = new TextEncoder();

/** ASCII name bytes (already checked against its pattern). */
export function asciiBytes(s: string): Uint8Array {
  return encoder.encode(s);
}

export function need(b: Uint8Array, end: number, what: string, offset: number): void {
  if (b.length < end) {
    throw new PsWireError(
      'ERR_PS_WIRE_TRUNCATED',
      `${what}: ${end} bytes needed, ${b.length} present`,
      {
        offset,
      },
    );
  }
}

export function exact(b: Uint8Array, total: number, what: string): void {
  need(b, total, what, b.length);
  if (b.length > total) {
    throw new PsWireError(
      'ERR_PS_WIRE_TRAILING',
      `${what}: ${b.length - total} bytes past its end`,
      {
        offset: total,
      },
    );
  }
}

/** Checks version, kind and the zero reserved u16 at bytes 2–3 of every message. */
export function header(b: Uint8Array, kind: number, fixed: number, what: string): DataView {
  need(b, fixed, what, b.length);
  const v = viewOf(b);
  if (b[0] !== PS_WIRE_VERSION) {
    throw new PsWireError('ERR_PS_WIRE_VERSION', `${what}: version ${b[0]}`, { offset: 0 });
  }
  if (b[1] !== kind) {
    throw new PsWireError('ERR_PS_WIRE_KIND', `${what}: kind ${b[1]}, expected ${kind}`, {
      offset: 1,
    });
  }
  return v;
}

export function zero(v: DataView, offset: number, width: 1 | 2 | 4, what: string): void {
  const x =
    width === 1
      ? v.getUint8(offset)
      : width === 2
        ? v.getUint16(offset, true)
        : v.getUint32(offset, true);
  if (x !== 0)
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: reserved field not zero`, { offset });
}

/** Reads `len` ASCII bytes at `offset` matching `pattern`, and checks the zero padding to 8. */
export function readName(
  b: Uint8Array,
  offset: number,
  len: number,
  pattern: RegExp,
  what: string,
): string {
  const cache = nameCacheOf(pattern);
  let s = cache?.find(b, offset, len);
  if (s === undefined) {
    s = '';
    for (let i = 0; i < len; i++) s += String.fromCharCode(b[offset + i] as number);
    if (!pattern.test(s))
      throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: bad name`, { offset });
    // A copy: Buffer#slice is a view, and a view would pin the peer's frame (up to its
    // size, past the credit it returned) and alias whatever reuses that memory.
    cache?.add(s, new Uint8Array(b.subarray(offset, offset + len)));
  }
  for (let i = offset + len; i < offset + pad8(len); i++) {
    if (b[i] !== 0)
      throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: padding not zero`, { offset: i });
  }
  return s;
}

export function writeName(out: Uint8Array, offset: number, name: Uint8Array): number {
  out.set(name, offset);
  return offset + pad8(name.length);
}

/**
 * u64 keys at `offset`: a view when aligned on a little-endian host, else a copy — one
 * byte copy (memcpy) on little-endian hosts, not a `getBigUint64` (and a bigint) per key.
 */
export function readKeys(b: Uint8Array, offset: number, count: number): BigUint64Array {
  const at = b.byteOffset + offset;
  if (LITTLE_ENDIAN && at % 8 === 0) return new BigUint64Array(b.buffer, at, count);
  const out = new BigUint64Array(count);
  if (LITTLE_ENDIAN) {
    new Uint8Array(out.buffer).set(b.subarray(offset, offset + 8 * count));
    return out;
  }
  const v = viewOf(b);
  for (let i = 0; i < count; i++) out[i] = v.getBigUint64(offset + 8 * i, true);
  return out;
}

/** f32 values at `offset`: a view when aligned on a little-endian host, else a copy (memcpy on little-endian hosts). */
export function readFloats(b: Uint8Array, offset: number, count: number): Float32Array {
  const at = b.byteOffset + offset;
  if (LITTLE_ENDIAN && at % 4 === 0) return new Float32Array(b.buffer, at, count);
  const out = new Float32Array(count);
  if (LITTLE_ENDIAN) {
    new Uint8Array(out.buffer).set(b.subarray(offset, offset + 4 * count));
    return out;
  }
  const v = viewOf(b);
  for (let i = 0; i < count; i++) out[i] = v.getFloat32(offset + 4 * i, true);
  return out;
}

export function writeKeys(out: Uint8Array, offset: number, keys: BigUint64Array): void {
  if (LITTLE_ENDIAN) {
    out.set(new Uint8Array(keys.buffer, keys.byteOffset, keys.byteLength), offset);
    return;
  }
  const v = viewOf(out);
  for (let i = 0; i < keys.length; i++) v.setBigUint64(offset + 8 * i, keys[i] as bigint, true);
}

export function writeFloats(out: Uint8Array, offset: number, f: Float32Array): void {
  if (LITTLE_ENDIAN) {
    out.set(new Uint8Array(f.buffer, f.byteOffset, f.byteLength), offset);
    return;
  }
  const v = viewOf(out);
  for (let i = 0; i < f.length; i++) v.setFloat32(offset + 4 * i, f[i] as number, true);
}

export function readSeq(v: DataView, offset: number, what: string): number {
  const seq = v.getBigUint64(offset, true);
  if (seq > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new PsWireError('ERR_PS_WIRE_FIELD', `${what}: sequence beyond 2^53 − 1`, { offset });
  }
  return Number(seq);
}

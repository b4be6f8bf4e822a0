// The safetensors container: u64 LE header length, JSON header, raw little-endian tensor
// bytes. Parsing here checks structure only; the snapshot layer checks checksums and content.
import { PsCorruptError } from '../errors.js';

export type Dtype = 'U64' | 'F32' | 'F16' | 'U32' | 'F64' | 'U16';
export const DTYPE_BYTES: Record<Dtype, number> = {
  U64: 8,
  F32: 4,
  F16: 2,
  U32: 4,
  F64: 8,
  U16: 2,
};

export interface TensorSpec {
  name: string;
  dtype: Dtype;
  shape: number[];
}

export interface TensorEntry extends TensorSpec {
  /** Offsets into the data section. */
  begin: number;
  end: number;
}

/** Assigns data offsets in order and returns the entries and the data size. */
export function layout(specs: TensorSpec[]): { entries: TensorEntry[]; dataBytes: number } {
  let off = 0;
  const entries = specs.map((s) => {
    const n = s.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[s.dtype];
    const e = { ...s, begin: off, end: off + n };
    off += n;
    return e;
  });
  return { entries, dataBytes: off };
}

/** The header bytes (length prefix + JSON padded with spaces to a multiple of 8). */
export function encodeHeader(entries: TensorEntry[], metadata: Record<string, string>): Uint8Array {
  const obj: Record<string, unknown> = { __metadata__: metadata };
  for (const e of entries)
    obj[e.name] = { dtype: e.dtype, shape: e.shape, data_offsets: [e.begin, e.end] };
  let json = JSON.stringify(obj);
  const pad = (8 - ((8 + Buffer.byteLength(json)) % 8)) % 8;
  json += ' '.repeat(pad);
  const body = Buffer.from(json, 'utf8');
  const out = new Uint8Array(8 + body.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(body.length), true);
  out.set(body, 8);
  return out;
}

export interface Parsed {
  headerBytes: number;
  headerText: string;
  metadata: Record<string, string>;
  tensors: Map<string, TensorEntry>;
  /** File offset of the data section. */
  dataStart: number;
}

/** Parses and structurally validates a whole safetensors file. */
export function parse(buf: Uint8Array, file: string): Parsed {
  if (buf.length < 8)
    throw new PsCorruptError(
      file,
      0,
      `file is ${buf.length} bytes, shorter than the 8-byte header length`,
    );
  const n = new DataView(buf.buffer, buf.byteOffset, 8).getBigUint64(0, true);
  if (n < 2n || n > BigInt(buf.length - 8))
    throw new PsCorruptError(file, 0, `header length ${n} does not fit a ${buf.length}-byte file`);
  const headerBytes = Number(n);
  const text = Buffer.from(buf.buffer, buf.byteOffset + 8, headerBytes).toString('utf8');
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch (err) {
    throw new PsCorruptError(file, 8, 'header is not valid JSON', { cause: err });
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj))
    throw new PsCorruptError(file, 8, 'header is not a JSON object');
  const metadata: Record<string, string> = {};
  const tensors = new Map<string, TensorEntry>();
  const dataStart = 8 + headerBytes;
  const dataLen = buf.length - dataStart;
  const spans: Array<[number, number]> = [];
  for (const [name, v] of Object.entries(obj as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (v === null || typeof v !== 'object')
        throw new PsCorruptError(file, 8, '__metadata__ is not an object');
      for (const [k, s] of Object.entries(v as Record<string, unknown>)) {
        if (typeof s !== 'string')
          throw new PsCorruptError(file, 8, `__metadata__.${k} is not a string`);
        metadata[k] = s;
      }
      continue;
    }
    const t = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (
      t === null ||
      typeof t !== 'object' ||
      typeof t.dtype !== 'string' ||
      !(t.dtype in DTYPE_BYTES)
    )
      throw new PsCorruptError(file, 8, `tensor ${name}: bad dtype`);
    const shape = t.shape;
    const offs = t.data_offsets;
    if (!Array.isArray(shape) || shape.some((d) => !Number.isSafeInteger(d) || d < 0))
      throw new PsCorruptError(file, 8, `tensor ${name}: bad shape`);
    if (
      !Array.isArray(offs) ||
      offs.length !== 2 ||
      offs.some((d) => !Number.isSafeInteger(d) || d < 0)
    )
      throw new PsCorruptError(file, 8, `tensor ${name}: bad data_offsets`);
    const [begin, end] = offs as [number, number];
    const bytes = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype as Dtype];
    if (end < begin || end - begin !== bytes || end > dataLen)
      throw new PsCorruptError(
        file,
        8,
        `tensor ${name}: data_offsets [${begin}, ${end}] disagree with shape or file size`,
      );
    spans.push([begin, end]);
    tensors.set(name, { name, dtype: t.dtype as Dtype, shape: shape as number[], begin, end });
  }
  spans.sort((a, b) => a[0] - b[0]);
  let cursor = 0;
  for (const [b, e] of spans) {
    if (b !== cursor) throw new PsCorruptError(file, 8, 'tensor data overlaps or leaves holes');
    cursor = e;
  }
  if (cursor !== dataLen)
    throw new PsCorruptError(
      file,
      dataStart + cursor,
      `data section is ${dataLen} bytes, tensors cover ${cursor}`,
    );
  return { headerBytes, headerText: text, metadata, tensors, dataStart };
}

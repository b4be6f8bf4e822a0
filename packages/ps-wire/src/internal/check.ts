import { PsWireError } from '../errors.js';
import { MAX_WIRE_DIM, MAX_WIRE_SEQ, NAME_PATTERN, WRITER_PATTERN } from '../Schema.js';
import { asciiBytes } from './bytes.js';
import { TABLE_NAMES, WRITER_NAMES } from './NameCache.js';

const bad = (msg: string): PsWireError => new PsWireError('ERR_PS_WIRE_INVALID_ARG', msg);

export function checkName(name: unknown, what = 'name'): string {
  if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    throw bad(`${what} must be 1–200 characters of [A-Za-z0-9_.-]`);
  }
  return name;
}

/**
 * The ASCII bytes of a table / dense name, checked (ERR_PS_WIRE_INVALID_ARG): a name seen
 * before costs a map lookup. Read only (shared).
 */
export function nameBytes(name: unknown, what = 'name'): Uint8Array {
  const hit = typeof name === 'string' ? TABLE_NAMES.bytesOf(name) : undefined;
  if (hit !== undefined) return hit;
  const bytes = asciiBytes(checkName(name, what));
  TABLE_NAMES.add(name as string, bytes);
  return bytes;
}

/** The same for a writer id. */
export function writerBytes(writer: unknown): Uint8Array {
  const hit = typeof writer === 'string' ? WRITER_NAMES.bytesOf(writer) : undefined;
  if (hit !== undefined) return hit;
  const bytes = asciiBytes(checkWriter(writer));
  WRITER_NAMES.add(writer as string, bytes);
  return bytes;
}

export function checkWriter(writer: unknown): string {
  if (typeof writer !== 'string' || !WRITER_PATTERN.test(writer)) {
    throw bad('writer must be 1–64 characters of [A-Za-z0-9_-]');
  }
  return writer;
}

export function checkSeq(seq: unknown): number {
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 0 || seq > MAX_WIRE_SEQ) {
    throw bad('seq must be a non-negative safe integer');
  }
  return seq;
}

export function checkDim(dim: unknown): number {
  if (typeof dim !== 'number' || !Number.isInteger(dim) || dim < 1 || dim > MAX_WIRE_DIM) {
    throw bad(`dim must be an integer in [1, ${MAX_WIRE_DIM}]`);
  }
  return dim;
}

export function checkKeys(keys: unknown): BigUint64Array {
  if (!(keys instanceof BigUint64Array)) throw bad('keys must be a BigUint64Array');
  return keys;
}

export function checkFloats(f: unknown, what: string): Float32Array {
  if (!(f instanceof Float32Array)) throw bad(`${what} must be a Float32Array`);
  return f;
}

export function checkU32(n: unknown, what: string): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 0xffff_ffff) {
    throw bad(`${what} must be an integer in [0, 2^32 − 1]`);
  }
  return n;
}

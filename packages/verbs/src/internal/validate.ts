// Argument checks: JS validates so that C++ can trust plain numbers. Every check runs
// before any side effect, and every failure is an RdmaError with a stable code.
import { RdmaError } from '../errors.js';

export function invalid(message: string): RdmaError {
  return new RdmaError('ERR_RDMA_INVALID_ARG', message);
}

export function outOfRange(message: string): RdmaError {
  return new RdmaError('ERR_RDMA_OUT_OF_RANGE', message);
}

/** A value as an error message shows it: its type, and the value quoted. */
export function describe(v: unknown): string {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'string':
      return `string '${v.length > 40 ? `${v.slice(0, 40)}…` : v}'`;
    case 'number':
      return `number ${v}`;
    case 'bigint':
      return `bigint ${v}n`;
    case 'boolean':
      return `boolean ${v}`;
    case 'undefined':
      return 'undefined';
    case 'function':
      return 'a function';
    case 'symbol':
      return 'a symbol';
    default:
      return Array.isArray(v) ? 'an array' : `an object (${v.constructor?.name ?? 'no prototype'})`;
  }
}

/** An integer in [min, max]? Small enough to be inlined: the data path calls it per WR. */
export function isIntIn(v: unknown, min: number, max: number): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
}

/** The error for a value that failed isIntIn (called only when throwing). */
export function intError(name: string, v: unknown, min: number, max: number): RdmaError {
  if (typeof v !== 'number' || !Number.isInteger(v))
    return invalid(`${name} must be an integer, got ${describe(v)}`);
  return outOfRange(`${name} must be in [${min}, ${max}], got ${v}`);
}

export function checkInt(name: string, v: unknown, min: number, max: number): number {
  if (!isIntIn(v, min, max)) throw intError(name, v, min, max);
  return v;
}

export function optInt(name: string, v: unknown, min: number, max: number, dflt: number): number {
  return v === undefined ? dflt : checkInt(name, v, min, max);
}

/** A finite number in [min, max] (not necessarily an integer). */
export function checkBoolean(name: string, v: unknown): boolean {
  if (typeof v !== 'boolean') throw invalid(`${name} must be a boolean, got ${describe(v)}`);
  return v;
}

export function checkNumber(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || Number.isNaN(v))
    throw invalid(`${name} must be a number, got ${describe(v)}`);
  if (!(v >= min && v <= max)) throw outOfRange(`${name} must be in [${min}, ${max}], got ${v}`);
  return v;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/**
 * An options argument: undefined or null (all defaults) or a plain object with only the
 * keys named. Returns a null-prototype copy of its own properties, so an inherited
 * property (`'soft'.link` is String.prototype.link) is never read as an option. An option
 * that is undefined or null takes its default (as in @rdmajs/allocator and flowctl).
 */
export function readOptions<K extends string>(
  what: string,
  v: unknown,
  keys: readonly K[],
): Partial<Record<K, unknown>> {
  const out = Object.create(null) as Partial<Record<K, unknown>>;
  if (v === undefined || v === null) return out;
  if (!isPlainObject(v)) throw invalid(`${what} must be an options object, got ${describe(v)}`);
  for (const k of Object.keys(v)) {
    if (!(keys as readonly string[]).includes(k))
      throw invalid(`${what}: unknown option '${k}' (known: ${keys.join(', ')})`);
    const value = v[k];
    if (value !== undefined && value !== null) out[k as K] = value;
  }
  return out;
}

/** An own property of an object given by the caller (never an inherited one). */
export function own(o: object, key: string): unknown {
  return Object.hasOwn(o, key) ? (o as Record<string, unknown>)[key] : undefined;
}

export const MAX_U32 = 0xffff_ffff;
export const MAX_WR_ID = Number.MAX_SAFE_INTEGER;
/** Addresses are doubles on the JS side: only integers JS represents exactly are valid. */
export const MAX_ADDR = Number.MAX_SAFE_INTEGER;
/** setTimeout's largest delay; a longer one fires at once. */
export const MAX_TIMEOUT_MS = 0x7fff_ffff;

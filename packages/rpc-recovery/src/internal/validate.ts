import { RpcError } from '../errors.js';

function invalid(message: string): RpcError {
  return new RpcError('ERR_RPC_INVALID_ARG', message);
}

/** A value as messages show it: its type and, for primitives, the value (`string '64'`). */
export function describeValue(v: unknown): string {
  switch (typeof v) {
    case 'string':
      return `string '${v.length > 40 ? `${v.slice(0, 40)}…` : v}'`;
    case 'number':
    case 'boolean':
      return `${typeof v} ${String(v)}`;
    case 'bigint':
      return `bigint ${v}n`;
    case 'undefined':
      return 'undefined';
    default: {
      if (v === null) return 'null';
      if (Array.isArray(v)) return 'array';
      if (typeof v === 'function') return 'function';
      if (typeof v === 'symbol') return 'symbol';
      const name = (Object.getPrototypeOf(v) as { constructor?: { name?: unknown } } | null)
        ?.constructor?.name;
      return typeof name === 'string' && name !== '' && name !== 'Object'
        ? `${name} object`
        : 'object';
    }
  }
}

/** Throws ERR_RPC_INVALID_ARG unless `value` is an integer in [min, max]. */
export function checkInt(
  what: string,
  value: unknown,
  min: number,
  max: number = Number.MAX_SAFE_INTEGER,
): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalid(`${what} must be an integer in [${min}, ${max}], got ${describeValue(value)}`);
  }
  return value;
}

/** Throws ERR_RPC_INVALID_ARG unless `value` is a finite number in [min, max]. */
export function checkNumber(
  what: string,
  value: unknown,
  min: number,
  max = Number.MAX_VALUE,
): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    throw invalid(
      `${what} must be a finite number in [${min}, ${max}], got ${describeValue(value)}`,
    );
  }
  return value;
}

/** Throws ERR_RPC_INVALID_ARG unless `value` is a Uint8Array (a Buffer is one). */
export function checkBytes(
  what: string,
  value: unknown,
  minLength = 0,
  maxLength = 2 ** 32 - 1,
): Uint8Array {
  if (!(value instanceof Uint8Array) || value.length < minLength || value.length > maxLength) {
    throw invalid(
      `${what} must be a Uint8Array of ${minLength} to ${maxLength} bytes, got ${
        value instanceof Uint8Array ? `${value.length} bytes` : describeValue(value)
      }`,
    );
  }
  return value;
}

/** Throws ERR_RPC_INVALID_ARG unless `value` is a function. */
export function checkFunction<T>(what: string, value: unknown): T {
  if (typeof value !== 'function') {
    throw invalid(`${what} must be a function, got ${describeValue(value)}`);
  }
  return value as T;
}

/** Session ids: 1..64 characters of [0-9A-Za-z_-] (the server issues 32 hex digits). */
const SESSION_ID = /^[0-9A-Za-z_-]{1,64}$/;
export const MAX_SESSION_ID_LENGTH = 64;

/** Throws ERR_RPC_INVALID_ARG unless `value` is a well-formed session id. */
export function checkSessionId(value: unknown): string {
  if (typeof value !== 'string' || !SESSION_ID.test(value)) {
    throw invalid(
      `sessionId must be 1 to 64 characters of [0-9A-Za-z_-], got ${describeValue(value)}`,
    );
  }
  return value;
}

/**
 * The own enumerable properties of an options argument, in a null-prototype copy: inherited
 * properties (a polluted Object.prototype) are never read. `undefined` is {} when `optional`.
 */
export function ownOptions(
  what: string,
  value: unknown,
  optional = false,
): Record<string, unknown> {
  const own = Object.create(null) as Record<string, unknown>;
  if (value === undefined && optional) return own;
  if (
    typeof value !== 'object' ||
    value === null ||
    Object.prototype.toString.call(value) !== '[object Object]'
  ) {
    throw invalid(`${what} must be an options object, got ${describeValue(value)}`);
  }
  return Object.assign(own, value);
}

/** Throws ERR_RPC_INVALID_ARG for an option this object does not know (a typo is a mistake). */
export function checkKnownKeys(
  what: string,
  opts: Record<string, unknown>,
  known: readonly string[],
): void {
  for (const k of Object.keys(opts)) {
    if (!known.includes(k)) throw invalid(`${what}: unknown option '${k}'`);
  }
}

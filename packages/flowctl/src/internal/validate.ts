import type { Clock } from '../Clock.js';
import { FlowctlError } from '../errors.js';

function invalid(message: string): FlowctlError {
  return new FlowctlError('ERR_FLOWCTL_INVALID_ARG', message);
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
    case 'symbol':
      return `symbol ${v.description ?? ''}`;
    case 'function':
      return `function ${v.name === '' ? '(anonymous)' : v.name}`;
    case 'undefined':
      return 'undefined';
    default: {
      if (v === null) return 'null';
      if (Array.isArray(v)) return 'array';
      const name = (Object.getPrototypeOf(v) as { constructor?: { name?: unknown } } | null)
        ?.constructor?.name;
      return typeof name === 'string' && name !== '' && name !== 'Object'
        ? `${name} object`
        : 'object';
    }
  }
}

/** Throws ERR_FLOWCTL_INVALID_ARG unless `value` is an integer in [min, max]. */
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

/** Throws ERR_FLOWCTL_INVALID_ARG unless `value` is a finite number >= min. */
export function checkNumber(what: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min) {
    throw invalid(`${what} must be a finite number >= ${min}, got ${describeValue(value)}`);
  }
  return value;
}

/**
 * The own enumerable properties of an options argument, in a null-prototype copy: inherited
 * properties (a polluted Object.prototype, `'x'.link`) are never read. `undefined` is {} when
 * `optional`. Strings, arrays, Maps and the like are ERR_FLOWCTL_INVALID_ARG.
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

/** An injected clock: now(), setTimer() and clearTimer() functions. */
export function checkClock(value: unknown): Clock | undefined {
  if (value === undefined) return undefined;
  const c = value as Partial<Clock> | null;
  if (
    c === null ||
    typeof c !== 'object' ||
    typeof c.now !== 'function' ||
    typeof c.setTimer !== 'function' ||
    typeof c.clearTimer !== 'function'
  ) {
    throw invalid(
      `clock must have now(), setTimer() and clearTimer(), got ${describeValue(value)}`,
    );
  }
  return c as Clock;
}

/** destroy(err): `err` is what pending waits reject with, so it must be an Error. */
export function checkDestroyError(err: unknown): Error | undefined {
  if (err !== undefined && !(err instanceof Error)) {
    throw invalid(`destroy(err) takes an Error, got ${describeValue(err)}`);
  }
  return err;
}

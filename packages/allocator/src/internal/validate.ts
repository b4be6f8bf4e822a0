import { AllocRegistrationError, invalidArg } from '../errors.js';
import type { Region, Registrar } from '../Registrar.js';

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

export function checkInt(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalidArg(`${name} must be an integer in [${min}, ${max}], got ${describeValue(value)}`);
  }
  return value;
}

/** A plain options object (`{...}` or a class instance, not a string, array, Map, …). */
function isOptionsObject(v: unknown): v is object {
  return (
    typeof v === 'object' && v !== null && Object.prototype.toString.call(v) === '[object Object]'
  );
}

/**
 * The own enumerable properties of an options argument, in a null-prototype copy: inherited
 * properties (a polluted Object.prototype, `'soft'.link`) are never read. `undefined` is {}.
 */
export function ownOptions(what: string, value: unknown): Record<string, unknown> {
  const own = Object.create(null) as Record<string, unknown>;
  if (value === undefined) return own;
  if (!isOptionsObject(value)) {
    throw invalidArg(`${what} must be an options object, got ${describeValue(value)}`);
  }
  return Object.assign(own, value);
}

/** Throws unless [offset, offset + length) lies inside `size` bytes of `what` (integers). */
export function checkRange(offset: unknown, length: unknown, size: number, what: string): void {
  if (
    typeof offset !== 'number' ||
    typeof length !== 'number' ||
    !Number.isInteger(offset) ||
    !Number.isInteger(length) ||
    offset < 0 ||
    length < 0 ||
    offset + length > size
  ) {
    throw invalidArg(
      `range (offset ${describeValue(offset)}, length ${describeValue(length)}) outside ${what} of ${size} bytes`,
    );
  }
}

/**
 * A usable registrar: register() and deregister() functions, optionally allocate(), and
 * optionally a boolean `closed` (read again at every call: see Registrar.closed).
 */
export function checkRegistrar(registrar: unknown): Registrar {
  const r = registrar as Partial<Registrar> | null | undefined;
  if (
    r === null ||
    typeof r !== 'object' ||
    typeof r.register !== 'function' ||
    typeof r.deregister !== 'function' ||
    (r.allocate !== undefined && typeof r.allocate !== 'function')
  ) {
    throw invalidArg(
      `registrar must have register() and deregister() (and optionally allocate()), got ${describeValue(registrar)}`,
    );
  }
  if (r.closed !== undefined && typeof r.closed !== 'boolean') {
    throw invalidArg(
      `registrar.closed must be a boolean when present, got ${describeValue(r.closed)}`,
    );
  }
  return r as Registrar;
}

const isKey = (v: unknown): boolean =>
  typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0xffff_ffff;

/**
 * Checks a region a registrar returned: a Uint8Array of at least `length` bytes, a
 * non-negative safe-integer address, 32-bit keys and, for an in-place registration, the
 * very memory that was passed in. Deregisters it and throws when it is unusable.
 */
export function checkRegion(
  registrar: Registrar,
  region: Region,
  length: number,
  operation: 'allocate' | 'register',
  inPlaceOf?: Uint8Array,
): Region {
  let problem: string | undefined;
  const bytes = (region as Partial<Region> | null | undefined)?.bytes;
  if (!(bytes instanceof Uint8Array)) problem = 'no bytes view';
  else if (bytes.byteLength < length) problem = `${bytes.byteLength} bytes, ${length} needed`;
  else if (!Number.isSafeInteger(region.addr) || region.addr < 0) problem = 'bad address';
  else if (!isKey(region.lkey) || !isKey(region.rkey)) problem = 'bad keys';
  else if (
    inPlaceOf !== undefined &&
    (bytes.buffer !== inPlaceOf.buffer || bytes.byteOffset !== inPlaceOf.byteOffset)
  ) {
    problem = 'not registered in place (bytes is not a view of the given memory)';
  }
  if (problem === undefined) return region;
  try {
    registrar.deregister(region);
  } catch {
    // The region is unusable either way; the error below says why.
  }
  throw new AllocRegistrationError(
    operation,
    `registrar ${operation} of ${length} bytes returned an unusable region: ${problem}`,
    undefined,
    false,
  );
}

/**
 * The length a range call means when it names none: the rest after `offset`. A bad `offset`
 * passes through, for checkRange to report (never `size - '1'` or `size - 1n` arithmetic).
 */
export function rest(offset: unknown, length: unknown, size: number): number {
  if (length !== undefined) return length as number;
  return (typeof offset === 'number' ? size - offset : offset) as number;
}

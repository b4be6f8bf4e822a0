import { AllocRegistrationError, invalidArg } from '../errors.js';
import type { Region, Registrar } from '../Registrar.js';

export function checkInt(name: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw invalidArg(`${name} must be an integer in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

/** Throws unless [offset, offset + length) lies inside `size` bytes of `what` (integers). */
export function checkRange(offset: number, length: number, size: number, what: string): void {
  if (
    !Number.isInteger(offset) ||
    !Number.isInteger(length) ||
    offset < 0 ||
    length < 0 ||
    offset + length > size
  ) {
    throw invalidArg(`range [${offset}, +${length}) outside ${what} of ${size} bytes`);
  }
}

export function checkRegistrar(registrar: unknown): Registrar {
  const r = registrar as Partial<Registrar> | null | undefined;
  if (
    r === null ||
    typeof r !== 'object' ||
    typeof r.register !== 'function' ||
    typeof r.deregister !== 'function' ||
    (r.allocate !== undefined && typeof r.allocate !== 'function')
  ) {
    throw invalidArg('registrar must have register() and deregister() (and optionally allocate())');
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

import { FlowctlError } from '../errors.js';

/** Throws ERR_FLOWCTL_INVALID_ARG unless `value` is an integer in [min, max]. */
export function checkInt(
  what: string,
  value: unknown,
  min: number,
  max: number = Number.MAX_SAFE_INTEGER,
): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new FlowctlError(
      'ERR_FLOWCTL_INVALID_ARG',
      `${what} must be an integer in [${min}, ${max}], got ${String(value)}`,
    );
  }
  return value;
}

/** Throws ERR_FLOWCTL_INVALID_ARG unless `value` is a finite number >= min. */
export function checkNumber(what: string, value: unknown, min: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min) {
    throw new FlowctlError(
      'ERR_FLOWCTL_INVALID_ARG',
      `${what} must be a finite number >= ${min}, got ${String(value)}`,
    );
  }
  return value;
}

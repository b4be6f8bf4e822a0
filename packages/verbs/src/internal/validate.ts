// Argument checks: JS validates so that C++ can trust plain numbers.
import { RdmaError } from '../errors.js';

export function invalid(message: string): RdmaError {
  return new RdmaError('ERR_RDMA_INVALID_ARG', message);
}

export function outOfRange(message: string): RdmaError {
  return new RdmaError('ERR_RDMA_OUT_OF_RANGE', message);
}

export function checkInt(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw invalid(`${name} must be an integer, got ${typeof v === 'number' ? v : typeof v}`);
  if (v < min || v > max) throw outOfRange(`${name} must be in [${min}, ${max}], got ${v}`);
  return v;
}

export function optInt(name: string, v: unknown, min: number, max: number, dflt: number): number {
  return v === undefined ? dflt : checkInt(name, v, min, max);
}

export const MAX_U32 = 0xffff_ffff;
export const MAX_WR_ID = Number.MAX_SAFE_INTEGER;

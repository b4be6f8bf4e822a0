import { PsWireError } from './errors.js';

/** Bounds a decoder enforces before it reads or allocates anything a count implies. */
export interface PsWireLimits {
  /** Keys in one pull or push. Default 2^20 (the store's MAX_BATCH_KEYS). */
  maxKeys: number;
  /** Floats in one message (rows of a pull reply, gradients, a dense tensor). Default 2^22 (16 MiB). */
  maxFloats: number;
  /** Tables (and, separately, dense tensors) in a table-info reply. Default 1024. */
  maxTables: number;
}

export const DEFAULT_PS_WIRE_LIMITS: Readonly<PsWireLimits> = Object.freeze({
  maxKeys: 1 << 20,
  maxFloats: 1 << 22,
  maxTables: 1024,
});

/** Limits with `overrides` applied, each checked (positive integers within u32). */
export function psWireLimits(overrides: Partial<PsWireLimits> = {}): PsWireLimits {
  const out = { ...DEFAULT_PS_WIRE_LIMITS, ...overrides };
  for (const k of ['maxKeys', 'maxFloats', 'maxTables'] as const) {
    const v = out[k];
    if (!Number.isInteger(v) || v < 1 || v > 0xffff_ffff) {
      throw new PsWireError('ERR_PS_WIRE_INVALID_ARG', `${k} must be an integer in [1, 2^32 − 1]`);
    }
  }
  return out;
}

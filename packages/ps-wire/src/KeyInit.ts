import { PsWireError } from './errors.js';
import { fmix32 } from './Hash.js';

/**
 * How rows of unseen keys start — part of the schema because both sides compute it: the
 * store for keys it has no row for, the client for rows of a shard that did not answer in
 * time (partial pulls). Element j of key k is a pure function of (seed, k, j).
 */
export type InitConfig =
  | { kind: 'zeros' }
  | { kind: 'uniform'; seed: number; low?: number; high?: number }
  | { kind: 'normal'; seed: number; mean?: number; std?: number };

/** An init with every default applied (what table info carries). */
export type ResolvedInit =
  | { kind: 'zeros' }
  | { kind: 'uniform'; seed: number; low: number; high: number }
  | { kind: 'normal'; seed: number; mean: number; std: number };

/** Fills out[o … o+dim) with the init of key (lo, hi) (its u32 halves). */
export type InitFn = (out: Float32Array, o: number, dim: number, lo: number, hi: number) => void;

export const INIT_DEFAULTS = Object.freeze({ low: -0.01, high: 0.01, mean: 0, std: 0.01 });

/**
 * A counter-based generator (Philox's idea, murmur3 finalizer rounds instead of Philox
 * rounds): every replica, restart and client agrees without storing anything.
 */
export function counterU32(seed: number, lo: number, hi: number, j: number): number {
  let h = fmix32((seed ^ 0x9e3779b9) >>> 0);
  h = fmix32((h ^ lo) >>> 0);
  h = fmix32((h ^ hi ^ 0x85ebca6b) >>> 0);
  return fmix32((h ^ Math.imul(j + 1, 0xc2b2ae35)) >>> 0);
}

const bad = (msg: string): PsWireError => new PsWireError('ERR_PS_WIRE_INVALID_ARG', msg);

function finite(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw bad(`init ${name} must be a finite number`);
  return v;
}

/** Applies the defaults and checks the values (ERR_PS_WIRE_INVALID_ARG). */
export function resolveInit(config: InitConfig | undefined): ResolvedInit {
  const c = config ?? { kind: 'zeros' };
  switch (c.kind) {
    case 'zeros':
      return { kind: 'zeros' };
    case 'uniform': {
      const seed = finite('seed', c.seed) >>> 0;
      const low = finite('low', c.low ?? INIT_DEFAULTS.low);
      const high = finite('high', c.high ?? INIT_DEFAULTS.high);
      if (!(high > low)) throw bad('init high must be > low');
      return { kind: 'uniform', seed, low, high };
    }
    case 'normal': {
      const seed = finite('seed', c.seed) >>> 0;
      const mean = finite('mean', c.mean ?? INIT_DEFAULTS.mean);
      const std = finite('std', c.std ?? INIT_DEFAULTS.std);
      if (!(std >= 0)) throw bad('init std must be ≥ 0');
      return { kind: 'normal', seed, mean, std };
    }
    default:
      throw bad(`unknown init kind ${String((c as { kind: unknown }).kind)}`);
  }
}

/** The row generator of a resolved init. */
export function initRowFn(init: ResolvedInit): InitFn {
  switch (init.kind) {
    case 'zeros':
      return (out, o, dim) => out.fill(0, o, o + dim);
    case 'uniform': {
      const { seed, low } = init;
      const span = init.high - low;
      return (out, o, dim, lo, hi) => {
        for (let j = 0; j < dim; j++)
          out[o + j] = low + span * (counterU32(seed, lo, hi, j) / 4294967296);
      };
    }
    case 'normal': {
      const { seed, mean, std } = init;
      // Box–Muller over counters 2j and 2j+1; u1 in (0, 1] so the log is finite.
      return (out, o, dim, lo, hi) => {
        for (let j = 0; j < dim; j++) {
          const u1 = (counterU32(seed, lo, hi, 2 * j) + 1) / 4294967296;
          const u2 = counterU32(seed, lo, hi, 2 * j + 1) / 4294967296;
          out[o + j] = mean + std * Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
        }
      };
    }
  }
}

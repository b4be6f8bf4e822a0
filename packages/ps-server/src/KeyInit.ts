import { invalidArg } from './errors.js';
import { fmix32 } from './internal/mix.js';

/** How rows of unseen keys start: zeros, or seeded random values derived from (seed, key). */
export type InitConfig =
  | { kind: 'zeros' }
  | { kind: 'uniform'; seed: number; low?: number; high?: number }
  | { kind: 'normal'; seed: number; mean?: number; std?: number };

/** Fills out[o … o+dim) with the init of key (lo, hi). */
export type InitFn = (out: Float32Array, o: number, dim: number, lo: number, hi: number) => void;

/**
 * A counter-based generator: element j of key k is a pure function of (seed, k, j), so
 * every replica and every restart agrees without storing anything (Philox's idea, with
 * murmur3 finalizer rounds instead of Philox rounds).
 */
export function counterU32(seed: number, lo: number, hi: number, j: number): number {
  let h = fmix32((seed ^ 0x9e3779b9) >>> 0);
  h = fmix32((h ^ lo) >>> 0);
  h = fmix32((h ^ hi ^ 0x85ebca6b) >>> 0);
  return fmix32((h ^ Math.imul(j + 1, 0xc2b2ae35)) >>> 0);
}

function finite(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw invalidArg(`init ${name} must be a finite number`);
  return v;
}

export function createInit(config: InitConfig | undefined): InitFn {
  const c = config ?? { kind: 'zeros' };
  switch (c.kind) {
    case 'zeros':
      return (out, o, dim) => out.fill(0, o, o + dim);
    case 'uniform': {
      const seed = finite('seed', c.seed) >>> 0;
      const low = finite('low', c.low ?? -0.01);
      const high = finite('high', c.high ?? 0.01);
      if (!(high > low)) throw invalidArg('init high must be > low');
      const span = high - low;
      return (out, o, dim, lo, hi) => {
        for (let j = 0; j < dim; j++)
          out[o + j] = low + span * (counterU32(seed, lo, hi, j) / 4294967296);
      };
    }
    case 'normal': {
      const seed = finite('seed', c.seed) >>> 0;
      const mean = finite('mean', c.mean ?? 0);
      const std = finite('std', c.std ?? 0.01);
      if (!(std >= 0)) throw invalidArg('init std must be ≥ 0');
      // Box–Muller over counters 2j and 2j+1; u1 in (0, 1] so the log is finite.
      return (out, o, dim, lo, hi) => {
        for (let j = 0; j < dim; j++) {
          const u1 = (counterU32(seed, lo, hi, 2 * j) + 1) / 4294967296;
          const u2 = counterU32(seed, lo, hi, 2 * j + 1) / 4294967296;
          out[o + j] = mean + std * Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
        }
      };
    }
    default:
      throw invalidArg(`unknown init kind ${String((c as { kind: unknown }).kind)}`);
  }
}

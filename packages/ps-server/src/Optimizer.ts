import { invalidArg } from './errors.js';
import { ABI } from './internal/abi.js';

/** Per-table optimizer. Formulas (and their float32 operation order) are in the README. */
export type OptimizerConfig =
  | {
      kind: 'sgd';
      lr: number;
      momentum?: number;
      dampening?: number;
      weightDecay?: number;
      nesterov?: boolean;
    }
  | {
      kind: 'adagrad';
      lr?: number;
      lrDecay?: number;
      weightDecay?: number;
      initialAccumulatorValue?: number;
      eps?: number;
    }
  | {
      kind: 'adam' | 'adamw';
      lr?: number;
      beta1?: number;
      beta2?: number;
      eps?: number;
      weightDecay?: number;
    }
  | { kind: 'ftrl'; alpha: number; beta?: number; l1?: number; l2?: number }
  | { kind: 'sum' }
  | { kind: 'assign' };

/**
 * What an update does when its result is not a finite number although the gradient was (an
 * overflowing square or product, ∞ − ∞ inside a formula): `'saturate'` (the default) holds
 * such a weight or state element at the largest finite value of its storage (±3.4e38 for
 * float32, ±65504 for f16 rows) and lets one that came out NaN keep its value from before the
 * update, so rows never hold NaN or ±Inf; `'allow'` stores what IEEE arithmetic gives.
 * A NaN or ±Inf *gradient* is not this policy's business: check pushes with
 * `firstNonFinite` before applying them (ps-service does, per table).
 */
export type OverflowPolicy = 'saturate' | 'allow';

/** Validates an overflow policy (default 'saturate'). */
export function overflowPolicy(what: string, v: unknown): OverflowPolicy {
  if (v === undefined) return 'saturate';
  if (v !== 'saturate' && v !== 'allow')
    throw invalidArg(`${what}: overflow must be 'saturate' or 'allow', got ${String(v)}`);
  return v;
}

/**
 * Applies one update to `dim` weights at w[wo…] with gradient g[go…] and the row's state at
 * s[so…] (stateSlots × dim floats). `step` is the row's step count including this update.
 */
export type UpdateKernel = (
  w: Float32Array,
  wo: number,
  s: Float32Array,
  so: number,
  g: Float32Array,
  go: number,
  dim: number,
  step: number,
) => void;

export interface Optimizer {
  readonly config: Readonly<OptimizerConfig>;
  /** Names of the per-row state tensors, each `dim` floats (snapshot tensor names). */
  readonly stateNames: readonly string[];
  /** Initial value of each state slot. */
  readonly stateInit: readonly number[];
  /** Whether the update reads a per-row step count. */
  readonly usesSteps: boolean;
  readonly update: UpdateKernel;
  /**
   * The same update as a native kernel (ABI.OPT_* and its parameters, already rounded as the
   * JS uses them), or null when only the JS kernel exists.
   */
  readonly native: NativeKernel | null;
}

export interface NativeKernel {
  readonly kind: number;
  readonly params: readonly number[];
  /**
   * Per-step float32 scalars the native kernel takes from JS (Adam's bias corrections: V8's
   * `**`, which a C library `pow` need not match bit for bit), written at out[at], out[at+1].
   * The JS update computes them with this same function.
   */
  readonly stepScalars?: (step: number, out: Float32Array, at: number) => void;
}

const f = Math.fround;

function num(
  name: string,
  v: number | undefined,
  dflt: number,
  min = 0,
  max = Number.POSITIVE_INFINITY,
): number {
  const x = v ?? dflt;
  if (typeof x !== 'number' || !Number.isFinite(x) || x < min || x > max)
    throw invalidArg(
      `optimizer ${name} must be a finite number in [${min}, ${max}], got ${String(v)}`,
    );
  return x;
}

/** Validates `config` and builds its kernel. Throws ERR_PS_INVALID_ARG on a bad config. */
export function createOptimizer(config: OptimizerConfig): Optimizer {
  if (config === null || typeof config !== 'object')
    throw invalidArg('optimizer config must be an object');
  switch (config.kind) {
    case 'sgd': {
      const lr = f(num('lr', config.lr, Number.NaN));
      const mu = f(num('momentum', config.momentum, 0));
      const damp1 = f(1 - num('dampening', config.dampening, 0, 0, 1));
      const wd = f(num('weightDecay', config.weightDecay, 0));
      const nesterov = config.nesterov ?? false;
      if (nesterov && mu === 0) throw invalidArg('nesterov needs momentum > 0');
      if (mu === 0) {
        return {
          config,
          stateNames: [],
          stateInit: [],
          usesSteps: false,
          native: { kind: ABI.OPT_SGD, params: [lr, wd] },
          update(w, wo, _s, _so, g, go, dim) {
            for (let j = 0; j < dim; j++) {
              const wj = w[wo + j] as number;
              let gj = g[go + j] as number;
              if (wd !== 0) gj = f(gj + f(wd * wj));
              w[wo + j] = f(wj - f(lr * gj));
            }
          },
        };
      }
      return {
        config,
        stateNames: ['momentum_buffer'],
        stateInit: [0],
        usesSteps: true,
        native: { kind: ABI.OPT_SGD_MOMENTUM, params: [lr, mu, damp1, wd, nesterov ? 1 : 0] },
        update(w, wo, s, so, g, go, dim, step) {
          for (let j = 0; j < dim; j++) {
            const wj = w[wo + j] as number;
            let gj = g[go + j] as number;
            if (wd !== 0) gj = f(gj + f(wd * wj));
            const b = step > 1 ? f(f(mu * (s[so + j] as number)) + f(damp1 * gj)) : gj;
            s[so + j] = b;
            gj = nesterov ? f(gj + f(mu * b)) : b;
            w[wo + j] = f(wj - f(lr * gj));
          }
        },
      };
    }
    case 'adagrad': {
      const lr = num('lr', config.lr, 0.01);
      const lrDecay = num('lrDecay', config.lrDecay, 0);
      const wd = f(num('weightDecay', config.weightDecay, 0));
      const init = num('initialAccumulatorValue', config.initialAccumulatorValue, 0);
      const eps = f(num('eps', config.eps, 1e-10));
      return {
        config,
        stateNames: ['sum'],
        stateInit: [init],
        usesSteps: true,
        native: { kind: ABI.OPT_ADAGRAD, params: [lr, lrDecay, wd, eps] },
        update(w, wo, s, so, g, go, dim, step) {
          const clr = f(lr / (1 + (step - 1) * lrDecay));
          for (let j = 0; j < dim; j++) {
            const wj = w[wo + j] as number;
            let gj = g[go + j] as number;
            if (wd !== 0) gj = f(gj + f(wd * wj));
            const sum = f((s[so + j] as number) + f(gj * gj));
            s[so + j] = sum;
            const std = f(f(Math.sqrt(sum)) + eps);
            w[wo + j] = f(wj - f(f(clr * gj) / std));
          }
        },
      };
    }
    case 'adam':
    case 'adamw': {
      const decoupled = config.kind === 'adamw';
      const lr = num('lr', config.lr, 1e-3);
      const b1 = num('beta1', config.beta1, 0.9, 0, 1);
      const b2 = num('beta2', config.beta2, 0.999, 0, 1);
      if (b1 >= 1 || b2 >= 1) throw invalidArg('beta1 and beta2 must be < 1');
      const eps = f(num('eps', config.eps, 1e-8));
      const wd = num('weightDecay', config.weightDecay, decoupled ? 1e-2 : 0);
      const b1f = f(b1);
      const b2f = f(b2);
      const c1 = f(1 - b1);
      const c2 = f(1 - b2);
      const wdf = f(wd);
      const decay = f(1 - lr * wd);
      // Scalars in double, then float32, as torch computes them in Python floats.
      const stepScalars = (step: number, out: Float32Array, at: number): void => {
        out[at] = lr / (1 - b1 ** step);
        out[at + 1] = Math.sqrt(1 - b2 ** step);
      };
      const sc = new Float32Array(2);
      return {
        config,
        stateNames: ['exp_avg', 'exp_avg_sq'],
        stateInit: [0, 0],
        usesSteps: true,
        native: {
          kind: decoupled ? ABI.OPT_ADAMW : ABI.OPT_ADAM,
          params: [b1f, b2f, c1, c2, eps, wdf, decay, wd !== 0 ? 1 : 0],
          stepScalars,
        },
        update(w, wo, s, so, g, go, dim, step) {
          stepScalars(step, sc, 0);
          const stepSize = sc[0] as number;
          const bc2Sqrt = sc[1] as number;
          const vo = so + dim;
          for (let j = 0; j < dim; j++) {
            let wj = w[wo + j] as number;
            let gj = g[go + j] as number;
            if (decoupled) {
              if (wd !== 0) wj = f(wj * decay);
            } else if (wd !== 0) gj = f(gj + f(wdf * wj));
            const m = f(f(b1f * (s[so + j] as number)) + f(c1 * gj));
            const v = f(f(b2f * (s[vo + j] as number)) + f(f(c2 * gj) * gj));
            s[so + j] = m;
            s[vo + j] = v;
            const denom = f(f(f(Math.sqrt(v)) / bc2Sqrt) + eps);
            w[wo + j] = f(wj - f(f(stepSize * m) / denom));
          }
        },
      };
    }
    case 'ftrl': {
      const alpha = num('alpha', config.alpha, Number.NaN);
      if (alpha <= 0) throw invalidArg('ftrl alpha must be > 0');
      const af = f(alpha);
      const bf = f(num('beta', config.beta, 1));
      const l1 = f(num('l1', config.l1, 0));
      const l2 = f(num('l2', config.l2, 0));
      return {
        config,
        stateNames: ['z', 'n'],
        stateInit: [0, 0],
        usesSteps: false,
        native: { kind: ABI.OPT_FTRL, params: [af, bf, l1, l2] },
        update(w, wo, s, so, g, go, dim) {
          const no = so + dim;
          for (let j = 0; j < dim; j++) {
            const gj = g[go + j] as number;
            const n = s[no + j] as number;
            const nNew = f(n + f(gj * gj));
            const sigma = f(f(f(Math.sqrt(nNew)) - f(Math.sqrt(n))) / af);
            const z = f(f((s[so + j] as number) + gj) - f(sigma * (w[wo + j] as number)));
            s[so + j] = z;
            s[no + j] = nNew;
            if (Math.abs(z) <= l1) w[wo + j] = 0;
            else {
              const zs = z > 0 ? f(z - l1) : f(z + l1);
              w[wo + j] = f(-zs / f(f(f(bf + f(Math.sqrt(nNew))) / af) + l2));
            }
          }
        },
      };
    }
    case 'sum':
      return {
        config,
        stateNames: [],
        stateInit: [],
        usesSteps: false,
        native: { kind: ABI.OPT_SUM, params: [] },
        update(w, wo, _s, _so, g, go, dim) {
          for (let j = 0; j < dim; j++)
            w[wo + j] = f((w[wo + j] as number) + (g[go + j] as number));
        },
      };
    case 'assign':
      return {
        config,
        stateNames: [],
        stateInit: [],
        usesSteps: false,
        native: { kind: ABI.OPT_ASSIGN, params: [] },
        update(w, wo, _s, _so, g, go, dim) {
          for (let j = 0; j < dim; j++) w[wo + j] = g[go + j] as number;
        },
      };
    default:
      throw invalidArg(`unknown optimizer kind ${String((config as { kind: unknown }).kind)}`);
  }
}

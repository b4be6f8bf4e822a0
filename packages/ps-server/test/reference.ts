// A straightforward reference of the documented update formulas, written independently of
// src/Optimizer.ts: one Map<bigint, row> and one formula per line, float32 via Math.fround.
import type { OptimizerConfig } from '../src/index.js';

const f = Math.fround;

export interface RefRow {
  w: number[];
  s: number[][];
  step: number;
}

export function refStateCount(c: OptimizerConfig): number {
  if (c.kind === 'sgd') return (c.momentum ?? 0) !== 0 ? 1 : 0;
  if (c.kind === 'adagrad') return 1;
  if (c.kind === 'adam' || c.kind === 'adamw' || c.kind === 'ftrl') return 2;
  return 0;
}

export function refInitState(c: OptimizerConfig, dim: number): number[][] {
  const v = c.kind === 'adagrad' ? (c.initialAccumulatorValue ?? 0) : 0;
  return Array.from({ length: refStateCount(c) }, () => new Array<number>(dim).fill(f(v)));
}

/** One optimizer step on one row, in place. */
export function refUpdate(c: OptimizerConfig, row: RefRow, g0: number[]): void {
  row.step++;
  const t = row.step;
  for (let j = 0; j < row.w.length; j++) {
    let w = row.w[j] as number;
    let g = g0[j] as number;
    switch (c.kind) {
      case 'sgd': {
        const wd = f(c.weightDecay ?? 0);
        const mu = f(c.momentum ?? 0);
        if (wd !== 0) g = f(g + f(wd * w));
        if (mu !== 0) {
          const s = row.s[0] as number[];
          const b = t === 1 ? g : f(f(mu * (s[j] as number)) + f(f(1 - (c.dampening ?? 0)) * g));
          s[j] = b;
          g = c.nesterov ? f(g + f(mu * b)) : b;
        }
        w = f(w - f(f(c.lr) * g));
        break;
      }
      case 'adagrad': {
        const lr = c.lr ?? 0.01;
        const clr = f(lr / (1 + (t - 1) * (c.lrDecay ?? 0)));
        const wd = f(c.weightDecay ?? 0);
        if (wd !== 0) g = f(g + f(wd * w));
        const s = row.s[0] as number[];
        s[j] = f((s[j] as number) + f(g * g));
        const std = f(f(Math.sqrt(s[j] as number)) + f(c.eps ?? 1e-10));
        w = f(w - f(f(clr * g) / std));
        break;
      }
      case 'adam':
      case 'adamw': {
        const lr = c.lr ?? 1e-3;
        const b1 = c.beta1 ?? 0.9;
        const b2 = c.beta2 ?? 0.999;
        const wd = c.weightDecay ?? (c.kind === 'adamw' ? 1e-2 : 0);
        if (c.kind === 'adamw') {
          if (wd !== 0) w = f(w * f(1 - lr * wd));
        } else if (wd !== 0) g = f(g + f(f(wd) * w));
        const m = row.s[0] as number[];
        const v = row.s[1] as number[];
        m[j] = f(f(f(b1) * (m[j] as number)) + f(f(1 - b1) * g));
        v[j] = f(f(f(b2) * (v[j] as number)) + f(f(f(1 - b2) * g) * g));
        const stepSize = f(lr / (1 - b1 ** t));
        const denom = f(
          f(f(Math.sqrt(v[j] as number)) / f(Math.sqrt(1 - b2 ** t))) + f(c.eps ?? 1e-8),
        );
        w = f(w - f(f(stepSize * (m[j] as number)) / denom));
        break;
      }
      case 'ftrl': {
        const a = f(c.alpha);
        const beta = f(c.beta ?? 1);
        const l1 = f(c.l1 ?? 0);
        const l2 = f(c.l2 ?? 0);
        const z = row.s[0] as number[];
        const n = row.s[1] as number[];
        const nNew = f((n[j] as number) + f(g * g));
        const sigma = f(f(f(Math.sqrt(nNew)) - f(Math.sqrt(n[j] as number))) / a);
        z[j] = f(f((z[j] as number) + g) - f(sigma * w));
        n[j] = nNew;
        const zj = z[j] as number;
        w =
          Math.abs(zj) <= l1
            ? 0
            : f(-(zj > 0 ? f(zj - l1) : f(zj + l1)) / f(f(f(beta + f(Math.sqrt(nNew))) / a) + l2));
        break;
      }
      case 'sum':
        w = f(w + g);
        break;
      case 'assign':
        w = g;
        break;
    }
    row.w[j] = w;
  }
}

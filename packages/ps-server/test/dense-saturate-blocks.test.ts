import { describe, expect, it } from 'vitest';
import { DenseTensor, type OptimizerConfig } from '../src/index.js';
import { F32_MAX, saturate } from '../src/internal/saturate.js';
import { bits } from './helpers.js';

/** The whole-tensor rule: copy values and state, update everything, saturate against the copy. */
function pushWhole(d: DenseTensor, grad: Float32Array): void {
  const oldV = d.values.slice();
  const oldS = d.state.slice();
  d.push(grad);
  saturate(d.values, 0, d.length, oldV, 0, F32_MAX);
  saturate(d.state, 0, d.state.length, oldS, 0, F32_MAX);
}

const optimizers: OptimizerConfig[] = [
  { kind: 'sum' },
  { kind: 'sgd', lr: 1e30, momentum: 0.9 },
  { kind: 'adagrad', lr: 1e30 },
  { kind: 'adam', lr: 1e30 },
  { kind: 'adamw', lr: 1e30, weightDecay: 0.5 },
  { kind: 'ftrl', alpha: 1e-30 },
];

describe('saturating dense tensors', () => {
  it('block_by_block_equals_the_whole_tensor_rule_bit_for_bit_with_overflows', () => {
    // 5000 elements: two whole blocks of 2048 and a partial one.
    const n = 5000;
    for (const optimizer of optimizers) {
      const blocks = new DenseTensor({ name: 'b', shape: [n], optimizer });
      const whole = new DenseTensor({ name: 'w', shape: [n], optimizer, overflow: 'allow' });
      let x = 99;
      for (let step = 0; step < 6; step++) {
        const g = new Float32Array(n);
        for (let j = 0; j < n; j++) {
          x = (Math.imul(x, 1103515245) + 12345) >>> 0;
          // Mostly ordinary gradients, some near the float limit (overflow, ∞ − ∞ → NaN).
          g[j] = x % 7 === 0 ? (x & 1 ? 3e38 : -3e38) : ((x >>> 8) / 2 ** 24 - 0.5) * 4;
        }
        blocks.push(g);
        pushWhole(whole, g);
        expect(bits(blocks.values), `${optimizer.kind} step ${step}`).toEqual(bits(whole.values));
        expect(bits(blocks.state), `${optimizer.kind} step ${step}`).toEqual(bits(whole.state));
      }
      let finite = true;
      for (const v of blocks.values) finite &&= Number.isFinite(v);
      for (const v of blocks.state) finite &&= Number.isFinite(v);
      expect(finite).toBe(true);
    }
  });
});

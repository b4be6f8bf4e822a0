import { describe, expect, it } from 'vitest';
import {
  DenseTensor,
  firstNonFinite,
  heapRowMemory,
  type OptimizerConfig,
  ParameterStore,
  PsError,
  SparseTable,
  type SparseTableConfig,
} from '../src/index.js';
import { F16_MAX, F32_MAX } from '../src/internal/saturate.js';
import { bits, keys } from './helpers.js';

const DIM = 4;

/** Every chunk of a table as snapshot bytes: rows, optimizer state, steps. */
function captured(t: SparseTable): { rows: Float32Array[]; state: Float32Array[] } {
  const cap = t.beginCapture();
  try {
    const rows: Float32Array[] = [];
    const state: Float32Array[] = [];
    for (let c = 0; c < cap.chunkCount; c++) {
      const ch = cap.take(c);
      if (t.rowDtype === 'f32') rows.push(new Float32Array(ch.rows.slice().buffer));
      for (const s of ch.state) state.push(new Float32Array(s.slice().buffer));
    }
    return { rows, state };
  } finally {
    t.endCapture();
  }
}

const allFinite = (a: readonly Float32Array[]) => a.every((x) => firstNonFinite(x) < 0);

const k32 = (...ks: number[]) => new Uint32Array(keys(...ks).buffer);

/** Finite gradients that overflow each optimizer's weights or state within a few pushes. */
const cases: { name: string; optimizer: OptimizerConfig; grad: number }[] = [
  { name: 'sgd_weights_past_max', optimizer: { kind: 'sgd', lr: 1e30 }, grad: -1e30 },
  {
    name: 'sgd_momentum_buffer_past_max',
    optimizer: { kind: 'sgd', lr: 1, momentum: 3 },
    grad: 3e38,
  },
  { name: 'adagrad_square_past_max', optimizer: { kind: 'adagrad', lr: 1e38 }, grad: 1e20 },
  { name: 'adam_square_past_max', optimizer: { kind: 'adam', lr: 1e38 }, grad: 1e30 },
  // n + g² overflows, then ∞ · 0 inside z's formula is NaN: z keeps its value.
  { name: 'ftrl_nan_inside_the_formula', optimizer: { kind: 'ftrl', alpha: 0.1 }, grad: 1e20 },
  { name: 'sum_past_max', optimizer: { kind: 'sum' }, grad: 3e38 },
];

function table(
  kernels: 'native' | 'js',
  optimizer: OptimizerConfig,
  extra: Partial<SparseTableConfig> = {},
): SparseTable {
  return new SparseTable(
    { name: `t${kernels}`, dim: DIM, optimizer, kernels, ...extra },
    heapRowMemory,
  );
}

describe('overflow: saturate (default) keeps rows and state finite for finite gradients', () => {
  for (const c of cases) {
    it(`${c.name}_native_and_js_agree_bit_for_bit`, () => {
      const nat = table('native', c.optimizer);
      const js = table('js', c.optimizer);
      const allow = table('js', c.optimizer, { overflow: 'allow' });
      const ks = k32(1, 2, 1); // a duplicate key too: its gradients are summed first
      const grads = new Float32Array(3 * DIM).fill(c.grad);
      for (let i = 0; i < 4; i++) {
        nat.push(ks, 3, grads, 0);
        js.push(ks, 3, grads, 0);
        allow.push(ks, 3, grads, 0);
      }
      const n = captured(nat);
      const j = captured(js);
      expect(allFinite(n.rows) && allFinite(n.state)).toBe(true);
      expect(n.rows.map(bits)).toEqual(j.rows.map(bits));
      expect(n.state.map(bits)).toEqual(j.state.map(bits));
      // Without saturation the same pushes do reach ±Inf or NaN: the case is a real one.
      const a = captured(allow);
      expect(allFinite(a.rows) && allFinite(a.state)).toBe(false);
    });
  }

  it('weights_are_held_at_plus_or_minus_max_by_sign', () => {
    for (const kernels of ['native', 'js'] as const) {
      const t = table(kernels, { kind: 'sum' });
      t.push(k32(1, 2), 2, Float32Array.from([3e38, -3e38, 1, 2, -3e38, 3e38, 3, 4]), 0);
      t.push(k32(1, 2), 2, Float32Array.from([3e38, -3e38, 1, 2, -3e38, 3e38, 3, 4]), 0);
      const out = new Float32Array(2 * DIM);
      t.pullInto(k32(1, 2), 2, out, 0);
      expect(Array.from(out)).toEqual([
        Math.fround(F32_MAX),
        -Math.fround(F32_MAX),
        2,
        4,
        -Math.fround(F32_MAX),
        Math.fround(F32_MAX),
        6,
        8,
      ]);
    }
  });

  it('f16_rows_saturate_at_the_largest_half_not_at_infinity', () => {
    for (const kernels of ['native', 'js'] as const) {
      const t = table(kernels, { kind: 'sum' }, { rowDtype: 'f16' });
      t.push(k32(9), 1, Float32Array.from([70000, -1e6, 65519, 1]), 0);
      const out = new Float32Array(DIM);
      t.pullInto(k32(9), 1, out, 0);
      expect(Array.from(out)).toEqual([F16_MAX, -F16_MAX, F16_MAX, 1]);
    }
  });

  it('an_update_that_is_undefined_keeps_the_previous_weight', () => {
    // sgd, lr 0, weight decay 1e38: g + wd·w overflows to ∞ and 0 · ∞ is NaN; the weight
    // (initialised in [1, 2)) keeps its value. With 'allow' it becomes NaN.
    const optimizer: OptimizerConfig = { kind: 'sgd', lr: 0, weightDecay: 1e38 };
    const init = { kind: 'uniform', seed: 1, low: 1, high: 2 } as const;
    const g = new Float32Array(DIM).fill(3e38);
    for (const kernels of ['native', 'js'] as const) {
      const s = table(kernels, optimizer, { init });
      const before = new Float32Array(DIM);
      s.pullInto(k32(5), 1, before, 0);
      expect(before[0]).toBeGreaterThanOrEqual(1);
      s.push(k32(5), 1, g, 0);
      const out = new Float32Array(DIM);
      s.pullInto(k32(5), 1, out, 0);
      expect(bits(out)).toEqual(bits(before));
      const a = table(kernels, optimizer, { init, overflow: 'allow' });
      a.push(k32(5), 1, g, 0);
      a.pullInto(k32(5), 1, out, 0);
      expect(Number.isNaN(out[0])).toBe(true);
    }
  });

  it('dense_tensors_saturate_too', () => {
    const d = new DenseTensor({ name: 'd', shape: [3], optimizer: { kind: 'sum' } });
    d.push(Float32Array.from([3e38, -3e38, 1]));
    d.push(Float32Array.from([3e38, -3e38, 1]));
    expect(Array.from(d.values)).toEqual([Math.fround(F32_MAX), -Math.fround(F32_MAX), 2]);
    const a = new DenseTensor({
      name: 'a',
      shape: [1],
      optimizer: { kind: 'sum' },
      overflow: 'allow',
    });
    a.push(Float32Array.from([3e38]));
    a.push(Float32Array.from([3e38]));
    expect(a.values[0]).toBe(Number.POSITIVE_INFINITY);
  });

  it('through_the_store_pushes_stay_finite_and_a_bad_policy_is_refused', async () => {
    const store = new ParameterStore({
      tables: [{ name: 'e', dim: 2, optimizer: { kind: 'sgd', lr: 1e30 } }],
    });
    const g = Float32Array.from([-1e30, 1e30]);
    for (let seq = 1; seq <= 3; seq++) await store.push('e', keys(7), g, { session: 'w', seq });
    const rows = new Float32Array(2);
    store.pullInto('e', keys(7), rows);
    expect(firstNonFinite(rows)).toBe(-1);
    await store.close();
    expect(
      () =>
        new SparseTable(
          // @ts-expect-error: not a policy
          { name: 'x', dim: 1, optimizer: { kind: 'sum' }, overflow: 'wrap' },
          heapRowMemory,
        ),
    ).toThrow(PsError);
  });
});

describe('firstNonFinite', () => {
  it('finds_the_first_nan_or_infinity_at_every_position_and_offset', () => {
    const buf = new Float32Array(300);
    for (const at of [0, 1, 5]) {
      const f = buf.subarray(at, at + 200);
      f.fill(1.5);
      expect(firstNonFinite(f)).toBe(-1);
      for (const i of [0, 3, 63, 64, 65, 127, 128, 190, 199]) {
        for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
          f.fill(1.5);
          f[i] = bad;
          if (i + 1 < f.length) f[f.length - 1] = bad;
          expect(firstNonFinite(f)).toBe(i);
        }
      }
    }
    expect(firstNonFinite(new Float32Array(0))).toBe(-1);
    // A view that does not start on a 4-byte boundary is impossible for a Float32Array; max is finite.
    expect(firstNonFinite(Float32Array.from([F32_MAX, -F32_MAX]))).toBe(-1);
  });
});

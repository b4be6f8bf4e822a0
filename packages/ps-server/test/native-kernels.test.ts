import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  heapRowMemory,
  type OptimizerConfig,
  PsError,
  SparseTable,
  type SparseTableConfig,
} from '../src/index.js';
import { checkAbi } from '../src/internal/abi.js';
import { HALF_TO_FLOAT } from '../src/internal/fp16.js';
import { bits } from './helpers.js';

const f32 = (min: number, max: number) =>
  fc.float({ min: Math.fround(min), max: Math.fround(max), noNaN: true, noDefaultInfinity: true });

const optimizers = fc.constantFrom<OptimizerConfig>(
  { kind: 'sgd', lr: 0.05 },
  { kind: 'sgd', lr: 0.05, weightDecay: 1e-3 },
  { kind: 'sgd', lr: 0.05, momentum: 0.9, dampening: 0.1, weightDecay: 1e-3 },
  { kind: 'sgd', lr: 0.05, momentum: 0.9, nesterov: true },
  { kind: 'adagrad' },
  { kind: 'adagrad', lr: 0.3, lrDecay: 0.01, weightDecay: 1e-3, initialAccumulatorValue: 0.1 },
  { kind: 'adam' },
  { kind: 'adamw', lr: 0.01 },
  { kind: 'ftrl', alpha: 0.1, l1: 0.01, l2: 0.1 },
  { kind: 'sum' },
  { kind: 'assign' },
);

/** A pair of identically configured tables, one per kernel implementation. */
function pair(config: Omit<SparseTableConfig, 'name' | 'kernels'>): [SparseTable, SparseTable] {
  return [
    new SparseTable({ ...config, name: 'n', kernels: 'native' }, heapRowMemory),
    new SparseTable({ ...config, name: 'j', kernels: 'js' }, heapRowMemory),
  ];
}

const k32Of = (ks: number[]) =>
  new Uint32Array(
    BigUint64Array.from(ks.map((k) => (BigInt(k) * 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn))
      .buffer,
  );

describe('native kernels against the JS reference kernels', () => {
  it('every_push_and_pull_is_bit_identical_with_admission_budget_ttl_fp16_and_growth', () => {
    fc.assert(
      fc.property(
        fc.record({
          dim: fc.integer({ min: 1, max: 40 }),
          optimizer: optimizers,
          f16: fc.boolean(),
          budget: fc.option(fc.integer({ min: 3000, max: 40000 }), { nil: undefined }),
          threshold: fc.option(fc.integer({ min: 1, max: 3 }), { nil: undefined }),
          ttl: fc.option(fc.integer({ min: 3, max: 40 }), { nil: undefined }),
          keySpace: fc.integer({ min: 4, max: 3000 }),
        }),
        fc.array(
          fc.record({
            keys: fc.array(fc.nat(), { minLength: 1, maxLength: 300 }),
            seed: f32(-3, 3),
            dt: fc.integer({ min: 0, max: 5 }),
          }),
          { minLength: 1, maxLength: 10 },
        ),
        (cfg, batches) => {
          const [nat, js] = pair({
            dim: cfg.dim,
            optimizer: cfg.optimizer,
            rowDtype: cfg.f16 ? 'f16' : 'f32',
            init: { kind: 'uniform', seed: 7, low: -1, high: 1 },
            ...(cfg.budget === undefined ? {} : { budgetBytes: cfg.budget }),
            ...(cfg.threshold === undefined
              ? {}
              : { admission: { threshold: cfg.threshold, width: 256, depth: 2 } }),
            ...(cfg.ttl === undefined ? {} : { ttlMs: cfg.ttl }),
          });
          expect(nat.kernels).toBe('native');
          expect(js.kernels).toBe('js');
          let now = 0;
          for (const b of batches) {
            now += b.dt;
            const ks = b.keys.map((k) => k % cfg.keySpace);
            const k32 = k32Of(ks);
            const grads = Float32Array.from({ length: ks.length * cfg.dim }, (_, i) =>
              Math.fround(b.seed * Math.sin(i + 1)),
            );
            expect(nat.push(k32, ks.length, grads, now)).toEqual(
              js.push(k32, ks.length, grads, now),
            );
            expect(nat.stats()).toEqual({ ...js.stats(), name: 'n' });
            // Pull this batch's keys and a fixed probe set (seen and unseen keys) from both.
            const probe = [...ks, ...Array.from({ length: 64 }, (_, i) => i)];
            const p32 = k32Of(probe);
            const a = new Float32Array(probe.length * cfg.dim);
            const c = new Float32Array(probe.length * cfg.dim);
            nat.pullInto(p32, probe.length, a, now);
            js.pullInto(p32, probe.length, c, now);
            expect(bits(a)).toEqual(bits(c));
          }
        },
      ),
      { numRuns: 250 },
    );
  });

  it('fp16_rows_widen_and_round_exactly_as_the_js_conversions', () => {
    // Every half value assigned and read back, then float32 values that need rounding.
    const [nat, js] = pair({ dim: 1, optimizer: { kind: 'assign' }, rowDtype: 'f16' });
    const n = 4096;
    const rnd = new Uint32Array(65536 + 8 * n);
    let x = 0x12345678;
    for (let i = 0; i < rnd.length; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      rnd[i] = x >>> 0;
    }
    const values = new Float32Array(rnd.length);
    values.set(HALF_TO_FLOAT);
    values.set(new Float32Array(rnd.buffer, 65536 * 4), 65536);
    for (let off = 0; off < values.length; off += n) {
      const ks = Array.from({ length: n }, (_, i) => off + i);
      const k32 = k32Of(ks);
      const g = values.subarray(off, off + n);
      nat.push(k32, n, g, 0);
      js.push(k32, n, g, 0);
      const a = new Float32Array(n);
      const c = new Float32Array(n);
      nat.pullInto(k32, n, a, 0);
      js.pullInto(k32, n, c, 0);
      expect(bits(a)).toEqual(bits(c));
    }
  });

  it('a_batch_longer_than_its_arrays_is_a_typed_error_and_writes_nothing', () => {
    const t = new SparseTable(
      { name: 't', dim: 4, optimizer: { kind: 'sum' }, kernels: 'native' },
      heapRowMemory,
    );
    const k32 = k32Of([1, 2, 3]);
    t.push(k32, 3, new Float32Array(12).fill(1), 0);
    const before = new Float32Array(12);
    t.pullInto(k32, 3, before, 0);
    const err = (fn: () => unknown) => {
      try {
        fn();
      } catch (e) {
        return e;
      }
      return null;
    };
    for (const e of [
      err(() => t.pullInto(k32, 4, new Float32Array(16), 0)),
      err(() => t.pullInto(k32, 3, new Float32Array(11), 0)),
      err(() => t.push(k32, 3, new Float32Array(11), 0)),
      err(() => t.push(k32, 4, new Float32Array(16), 0)),
    ]) {
      expect(e).toBeInstanceOf(PsError);
      expect((e as PsError).code).toBe('ERR_PS_INVALID_ARG');
    }
    const after = new Float32Array(12);
    t.pullInto(k32, 3, after, 0);
    expect(bits(after)).toEqual(bits(before));
    expect(t.rows).toBe(3);
  });

  it('an_addon_built_for_another_abi_is_err_ps_native_load_naming_the_field', () => {
    expect(() => checkAbi({ version: 1 }, '/x.node')).toThrow(/OPT_SGD/);
    try {
      checkAbi({}, '/x.node');
    } catch (e) {
      expect((e as PsError).code).toBe('ERR_PS_NATIVE_LOAD');
    }
  });
});

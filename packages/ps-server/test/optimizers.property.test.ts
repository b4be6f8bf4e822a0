import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type OptimizerConfig, ParameterStore } from '../src/index.js';
import { bits } from './helpers.js';
import { type RefRow, refInitState, refUpdate } from './reference.js';

const f32 = (min: number, max: number) =>
  fc.float({ min: Math.fround(min), max: Math.fround(max), noNaN: true, noDefaultInfinity: true });

const configs: fc.Arbitrary<OptimizerConfig> = fc.oneof(
  fc.record({
    kind: fc.constant('sgd' as const),
    lr: f32(1e-4, 1),
    momentum: fc.constantFrom(0, 0.9),
    dampening: fc.constantFrom(0, 0.1),
    weightDecay: fc.constantFrom(0, 1e-3),
  }),
  fc.record({
    kind: fc.constant('sgd' as const),
    lr: f32(1e-4, 1),
    momentum: fc.constant(0.9),
    nesterov: fc.constant(true),
  }),
  fc.record({
    kind: fc.constant('adagrad' as const),
    lr: f32(1e-4, 1),
    lrDecay: fc.constantFrom(0, 0.01),
    weightDecay: fc.constantFrom(0, 1e-3),
    initialAccumulatorValue: fc.constantFrom(0, 0.1),
  }),
  fc.record({
    kind: fc.constant('adam' as const),
    lr: f32(1e-4, 0.1),
    weightDecay: fc.constantFrom(0, 1e-2),
    beta1: fc.constantFrom(0.9, 0.5),
    beta2: fc.constantFrom(0.999, 0.99),
  }),
  fc.record({
    kind: fc.constant('adamw' as const),
    lr: f32(1e-4, 0.1),
    weightDecay: fc.constantFrom(0, 1e-2),
  }),
  fc.record({
    kind: fc.constant('ftrl' as const),
    alpha: f32(0.01, 1),
    beta: fc.constantFrom(0, 1),
    l1: fc.constantFrom(0, 0.01, 1),
    l2: fc.constantFrom(0, 0.1),
  }),
  fc.constant({ kind: 'sum' as const }),
  fc.constant({ kind: 'assign' as const }),
);

describe('optimizers against the reference formulas', () => {
  // The native kernels (default) and the JS ones each against the reference formulas.
  it.each(['native', 'js'] as const)(
    'sparse_pushes_with_duplicate_keys_match_bit_for_bit_%s',
    (kernels) => {
      fc.assert(
        fc.property(
          configs,
          fc.integer({ min: 1, max: 9 }),
          fc.array(
            fc.array(
              fc.tuple(
                fc.integer({ min: 0, max: 7 }),
                fc.array(f32(-4, 4), { minLength: 9, maxLength: 9 }),
              ),
              { minLength: 1, maxLength: 12 },
            ),
            { minLength: 1, maxLength: 8 },
          ),
          (opt, dim, batches) => {
            const store = new ParameterStore({
              tables: [
                {
                  name: 't',
                  dim,
                  optimizer: opt,
                  init: { kind: 'uniform', seed: 3, low: -1, high: 1 },
                  kernels,
                  // The reference is plain IEEE arithmetic (overflow-saturation.test.ts
                  // covers the default saturation).
                  overflow: 'allow',
                },
              ],
            });
            const fresh = new ParameterStore({
              tables: [
                {
                  name: 't',
                  dim,
                  optimizer: opt,
                  init: { kind: 'uniform', seed: 3, low: -1, high: 1 },
                  overflow: 'allow',
                },
              ],
            });
            const ref = new Map<number, RefRow>();
            const initOut = new Float32Array(dim);
            let seq = 0;
            for (const batch of batches) {
              const ks = BigUint64Array.from(batch.map(([k]) => BigInt(k) * 0x1_0000_0001n));
              const grads = new Float32Array(batch.length * dim);
              batch.forEach(([, g], i) => {
                grads.set(g.slice(0, dim), i * dim);
              });
              void store.push('t', ks, grads, { session: 's', seq: seq++ });
              // reference: sum duplicates in request order, then one update per distinct key
              const acc = new Map<number, number[]>();
              batch.forEach(([k, g]) => {
                const a = acc.get(k);
                if (a === undefined) acc.set(k, g.slice(0, dim));
                else
                  for (let j = 0; j < dim; j++)
                    a[j] = Math.fround((a[j] as number) + (g[j] as number));
              });
              for (const [k, g] of acc) {
                let row = ref.get(k);
                if (row === undefined) {
                  // the seeded init of an unseen key, from a store that never saw it
                  fresh.pullInto('t', BigUint64Array.of(BigInt(k) * 0x1_0000_0001n), initOut);
                  row = { w: Array.from(initOut), s: refInitState(opt, dim), step: 0 };
                  ref.set(k, row);
                }
                refUpdate(opt, row, g);
              }
            }
            for (const [k, row] of ref) {
              const out = new Float32Array(dim);
              store.pullInto('t', BigUint64Array.of(BigInt(k) * 0x1_0000_0001n), out);
              expect(bits(out)).toEqual(bits(Float32Array.from(row.w)));
            }
          },
        ),
        { numRuns: 400 },
      );
    },
  );

  it('dense_tensor_updates_match_bit_for_bit', () => {
    fc.assert(
      fc.property(
        configs,
        fc.array(fc.array(f32(-4, 4), { minLength: 6, maxLength: 6 }), {
          minLength: 1,
          maxLength: 6,
        }),
        (opt, grads) => {
          const store = new ParameterStore({
            dense: [
              {
                name: 'd',
                shape: [2, 3],
                optimizer: opt,
                init: { kind: 'normal', seed: 1 },
                overflow: 'allow',
              },
            ],
          });
          const w0 = new Float32Array(6);
          store.pullDense('d', w0);
          const row: RefRow = { w: Array.from(w0), s: refInitState(opt, 6), step: 0 };
          grads.forEach((g, i) => {
            void store.pushDense('d', Float32Array.from(g), { session: 's', seq: i });
            refUpdate(opt, row, g);
          });
          const out = new Float32Array(6);
          store.pullDense('d', out);
          expect(bits(out)).toEqual(bits(Float32Array.from(row.w)));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('adagrad_matches_a_hand_computed_step', async () => {
    // w = 1, g = 2, lr = 0.1: sum = 4, w' = 1 − 0.1·2/(2 + 1e-10) = 0.9
    const s = new ParameterStore({
      dense: [
        { name: 'd', shape: [1], optimizer: { kind: 'adagrad', lr: 0.1 }, init: { kind: 'zeros' } },
      ],
    });
    await s.pushDense('d', Float32Array.of(2), { session: 'a', seq: 1 });
    const out = new Float32Array(1);
    s.pullDense('d', out);
    expect(out[0]).toBe(Math.fround(-0.1));
    // Adam's first step moves each weight by ≈ lr·sign(g) (bias correction)
    const a = new ParameterStore({
      dense: [{ name: 'd', shape: [2], optimizer: { kind: 'adam', lr: 0.01 } }],
    });
    await a.pushDense('d', Float32Array.of(3, -0.5), { session: 'a', seq: 1 });
    const o2 = new Float32Array(2);
    a.pullDense('d', o2);
    expect(o2[0]).toBeCloseTo(-0.01, 6);
    expect(o2[1]).toBeCloseTo(0.01, 6);
  });
});

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HashIndex } from '../src/index.js';

const key = fc.oneof(
  fc.bigInt({ min: 0n, max: 63n }), // dense collisions in a small space
  fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
);
const op = fc.oneof(
  fc.record({
    t: fc.constant('set' as const),
    k: key,
    v: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
  }),
  fc.record({ t: fc.constant('del' as const), k: key }),
  fc.record({ t: fc.constant('get' as const), k: key }),
);

const split = (k: bigint): [number, number] => [Number(k & 0xffffffffn), Number(k >> 32n)];

describe('HashIndex against a Map', () => {
  it('agrees_under_random_insert_delete_lookup_and_incremental_growth', () => {
    fc.assert(
      fc.property(
        fc.array(op, { maxLength: 600 }),
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        (ops, salt) => {
          const h = new HashIndex({ initialBuckets: 2, salt });
          const m = new Map<bigint, number>();
          for (const o of ops) {
            const [lo, hi] = split(o.k);
            if (o.t === 'set') {
              h.set(lo, hi, o.v);
              m.set(o.k, o.v);
            } else if (o.t === 'del') {
              expect(h.delete(lo, hi)).toBe(m.delete(o.k));
            }
            expect(h.get(lo, hi)).toBe(m.get(o.k) ?? -1);
            expect(h.size).toBe(m.size);
          }
          const seen = new Map<bigint, number>();
          h.forEach((lo, hi, v) => {
            seen.set((BigInt(hi) << 32n) | BigInt(lo), v);
          });
          expect(seen).toEqual(m);
          for (const [k, v] of m) expect(h.get(...split(k))).toBe(v);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('growth_is_incremental_no_insert_moves_more_than_a_few_buckets', () => {
    const h = new HashIndex({ initialBuckets: 1024, salt: 1 });
    let maxGrowingInserts = 0;
    let run = 0;
    for (let i = 0; i < 20000; i++) {
      h.set(i * 7919, i, i);
      if (h.growing) run++;
      else {
        maxGrowingInserts = Math.max(maxGrowingInserts, run);
        run = 0;
      }
    }
    // Migration of B old buckets takes ≥ B/4 inserts: it is spread out, not done at once.
    expect(maxGrowingInserts).toBeGreaterThan(100);
    for (let i = 0; i < 20000; i++) expect(h.get(i * 7919, i)).toBe(i);
  });
});

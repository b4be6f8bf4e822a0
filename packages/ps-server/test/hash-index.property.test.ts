import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { tagOf } from '../src/HashIndex.js';
import { HashIndex } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import { hash64 } from '../src/internal/mix.js';
import { loadKernels } from '../src/internal/native.js';

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

  it('native_probes_agree_with_the_map_and_every_tag_names_its_bucket', () => {
    const SLOTS = 1024;
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({ t: fc.constant('set' as const), k: key, v: fc.nat(SLOTS - 1) }),
            fc.record({ t: fc.constant('del' as const), k: key }),
          ),
          { maxLength: 400 },
        ),
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        fc.array(key, { minLength: 1, maxLength: 40 }),
        (ops, salt, absent) => {
          const h = new HashIndex({ initialBuckets: 2, salt });
          const k = new (loadKernels().TableKernels)(
            1,
            ABI.ROW_F32,
            0,
            Math.log2(SLOTS),
            false,
            ABI.OPT_SUM,
            new Float64Array(0),
            Number.POSITIVE_INFINITY,
            true,
          );
          k.addChunk(new Float32Array(SLOTS), new Float32Array(0), null, null);
          const m = new Map<bigint, number>();
          let gen = -1;
          // Native lookups of ks (their batch sizes cover the 8-key hash path and its tail).
          const check = (ks: bigint[]) => {
            if (h.generation !== gen) {
              const t = h.probeTables();
              k.setIndex(t.buckets, t.tags, t.old, t.salt);
              gen = h.generation;
            }
            const slots = new Int32Array(ks.length);
            const misses = k.lookup(
              new Uint32Array(BigUint64Array.from(ks).buffer),
              ks.length,
              slots,
            );
            const want = ks.map((x) => m.get(x) ?? -1);
            expect(Array.from(slots)).toEqual(want);
            expect(misses).toBe(want.filter((v) => v < 0).length);
          };
          ops.forEach((o, i) => {
            const [lo, hi] = split(o.k);
            if (o.t === 'set') {
              h.set(lo, hi, o.v);
              m.set(o.k, o.v);
            } else {
              h.delete(lo, hi);
              m.delete(o.k);
            }
            check([o.k]);
            if (i % 25 === 24) check([...m.keys(), ...absent]);
          });
          check([...m.keys(), ...absent]);
          // Tags: the live table's bucket b is occupied exactly where tags[b] is not empty, its
          // tag is tagOf(its key's hash), and the bytes past the end mirror the first ones.
          const { buckets, tags } = h.probeTables();
          const n = buckets.length / 3;
          expect(tags.length).toBe(n + ABI.IDX_TAG_PAD);
          for (let b = 0; b < n; b++) {
            const v = buckets[3 * b + 2] as number;
            const want =
              v === ABI.IDX_EMPTY
                ? ABI.IDX_TAG_EMPTY
                : tagOf(
                    hash64(
                      (buckets[3 * b] as number) >>> 0,
                      (buckets[3 * b + 1] as number) >>> 0,
                      salt,
                    ),
                  );
            expect(tags[b]).toBe(want);
          }
          for (let p = n; p < tags.length; p++) expect(tags[p]).toBe(tags[p % n]);
        },
      ),
      { numRuns: 150 },
    );
  });

  it('native_probes_of_a_table_past_the_tag_limit_agree_with_the_map', () => {
    // 2^22 buckets: beyond kernels.cc kTagProbeMaxBuckets, so probes go bucket by bucket.
    const h = new HashIndex({ initialBuckets: 2 ** 22, salt: 7 });
    const k = new (loadKernels().TableKernels)(
      1,
      ABI.ROW_F32,
      0,
      12,
      false,
      ABI.OPT_SUM,
      new Float64Array(0),
      Number.POSITIVE_INFINITY,
      true,
    );
    k.addChunk(new Float32Array(4096), new Float32Array(0), null, null);
    const m = new Map<bigint, number>();
    fc.assert(
      fc.property(
        fc.array(fc.tuple(key, fc.nat(4095), fc.boolean()), { maxLength: 300 }),
        (ops) => {
          for (const [x, v, del] of ops) {
            const [lo, hi] = split(x);
            if (del) {
              h.delete(lo, hi);
              m.delete(x);
            } else {
              h.set(lo, hi, v);
              m.set(x, v);
            }
          }
          const t = h.probeTables();
          k.setIndex(t.buckets, t.tags, t.old, t.salt);
          const ks = [...m.keys(), ...ops.map(([x]) => x ^ 0x5555n)];
          const slots = new Int32Array(ks.length);
          k.lookup(new Uint32Array(BigUint64Array.from(ks).buffer), ks.length, slots);
          expect(Array.from(slots)).toEqual(ks.map((x) => m.get(x) ?? -1));
        },
      ),
      { numRuns: 40 },
    );
  });
});

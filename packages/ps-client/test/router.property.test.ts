import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { rendezvousScore, ShardRouter, shardSeed } from '../src/index.js';

const idsArb = (min: number, max: number) =>
  fc.uniqueArray(fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/), { minLength: min, maxLength: max });
/** 4000 keys from a seeded splitmix64 (cheap to generate and to shrink: only the seed). */
const keysArb = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }).map((seed) => {
  const M = 2n ** 64n - 1n;
  let x = seed;
  return BigUint64Array.from({ length: 4000 }, () => {
    x = (x + 0x9e3779b97f4a7c15n) & M;
    let z = x;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
    return z ^ (z >> 31n);
  });
});

describe('rendezvous routing', () => {
  it('a joining shard takes ~1/(N+1) of the keys, all from the others, and nothing else moves', () => {
    fc.assert(
      fc.property(
        idsArb(1, 8),
        fc.stringMatching(/^[A-Za-z0-9_-]{13,16}$/),
        keysArb,
        (ids, joiner, keys) => {
          const before = new ShardRouter(ids);
          const after = new ShardRouter([...ids, joiner]);
          const a = before.route(keys);
          const b = after.route(keys);
          let moved = 0;
          for (let i = 0; i < keys.length; i++) {
            if (a[i] !== b[i]) {
              moved++;
              expect(b[i]).toBe(ids.length); // only to the new shard
            }
          }
          const expected = keys.length / (ids.length + 1);
          // Binomial: 6 standard deviations either side.
          const sd = Math.sqrt(keys.length * (1 / (ids.length + 1)) * (1 - 1 / (ids.length + 1)));
          expect(Math.abs(moved - expected)).toBeLessThan(6 * sd);
        },
      ),
      { numRuns: 40 },
    );
  });

  it('a leaving shard moves only its own keys', () => {
    fc.assert(
      fc.property(idsArb(2, 8), fc.nat(), keysArb, (ids, pick, keys) => {
        const gone = pick % ids.length;
        const rest = ids.filter((_, i) => i !== gone);
        const before = new ShardRouter(ids);
        const after = new ShardRouter(rest);
        for (let i = 0; i < keys.length; i += 7) {
          const k = keys[i] as bigint;
          const was = ids[before.shardOf(k)];
          const now = rest[after.shardOf(k)];
          if (was !== ids[gone]) expect(now).toBe(was);
        }
      }),
      { numRuns: 40 },
    );
  });

  it('route() agrees with shardOf() and spreads keys evenly', () => {
    const ids = ['s0', 's1', 's2'];
    const r = new ShardRouter(ids);
    const keys = BigUint64Array.from(
      { length: 30_000 },
      (_, i) => (BigInt(i) * 0x9e3779b97f4a7c15n) & (2n ** 64n - 1n),
    );
    const routed = r.route(keys);
    const counts = new Uint32Array(3);
    for (let i = 0; i < keys.length; i++) {
      expect(routed[i]).toBe(r.shardOf(keys[i] as bigint));
      (counts[routed[i] as number] as number)++;
    }
    for (const c of counts) expect(Math.abs(c - 10_000)).toBeLessThan(600);
    // Sequential keys too (ids are often dense counters).
    const seq = BigUint64Array.from({ length: 30_000 }, (_, i) => BigInt(i));
    const c2 = new Uint32Array(3);
    for (const s of r.route(seq)) (c2[s] as number)++;
    for (const c of c2) expect(Math.abs(c - 10_000)).toBeLessThan(600);
  });
});

describe('rendezvous scores', () => {
  // MurmurHash3 x86-32 of lo ‖ hi as first written (a block mixed whole per shard): the
  // routing contract, which a faster form must reproduce bit for bit.
  const reference = (lo: number, hi: number, seed: number): number => {
    const block = (h: number, k: number): number => {
      k = Math.imul(k, 0xcc9e2d51);
      k = (k << 15) | (k >>> 17);
      k = Math.imul(k, 0x1b873593);
      h ^= k;
      h = (h << 13) | (h >>> 19);
      return (Math.imul(h, 5) + 0xe6546b64) | 0;
    };
    let h = block(block(seed | 0, lo), hi) ^ 8;
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return h >>> 0;
  };

  it('match_murmur3_and_route_keys_to_the_top_scoring_shard', () => {
    const u32 = fc.integer({ min: 0, max: 0xffff_ffff });
    fc.assert(
      fc.property(
        u32,
        u32,
        fc.array(fc.string({ minLength: 1, maxLength: 12 }), { minLength: 1, maxLength: 9 }),
        (lo, hi, names) => {
          const ids = [...new Set(names)];
          const r = new ShardRouter(ids);
          let best = 0;
          let bestScore = -1;
          ids.forEach((id, s) => {
            const sc = reference(lo, hi, shardSeed(id));
            expect(rendezvousScore(lo, hi, shardSeed(id))).toBe(sc);
            expect(rendezvousScore(lo | 0, hi | 0, shardSeed(id))).toBe(sc);
            if (sc > bestScore) {
              bestScore = sc;
              best = s;
            }
          });
          expect(r.shardOfHalves(lo, hi)).toBe(best);
          expect(r.shardOfHalves(lo | 0, hi | 0)).toBe(best);
        },
      ),
      { numRuns: 2000 },
    );
  });
});

import { decodePullRequest, MAX_MESSAGE_BYTES, PULL_REPLY_FIXED } from '@rdmajs/ps-wire';
import fc from 'fast-check';
import { expect, it } from 'vitest';
import { Deduper } from '../src/internal/dedupe.js';
import { PullPlan } from '../src/internal/PullPlan.js';
import type { ShardLink } from '../src/ShardLink.js';
import { ShardRouter } from '../src/ShardRouter.js';

it('PullPlan: every distinct key requested once from its shard, every row found at segOf/offOf, plans reused across batches', () => {
  const key = fc.oneof(
    fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
    fc.constantFrom(0n, 2n ** 32n - 1n, 2n ** 63n, 2n ** 64n - 1n),
    fc.nat({ max: 30 }).map(BigInt), // duplicates
  );
  // dim 4096: a shard's part above ~1023 keys takes several requests (segments).
  const batch = fc.record({
    shards: fc.integer({ min: 1, max: 5 }),
    dim: fc.constantFrom(1, 64, 4096),
    keys: fc.oneof(
      fc.array(key, { maxLength: 300 }),
      fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { minLength: 1100, maxLength: 3000 }),
    ),
    table: fc.constantFrom('emb', 'emb64_long_name'),
  });
  // One pool and one deduper for every batch, as a client uses them.
  const pool: PullPlan[] = [];
  const deduper = new Deduper();
  fc.assert(
    fc.property(batch, ({ shards, dim, keys: arr, table }) => {
      const keys = BigUint64Array.from(arr);
      const router = new ShardRouter(Array.from({ length: shards }, (_, s) => `s${s}`));
      const links = Array.from({ length: shards }, () => ({}) as ShardLink);
      const plan = PullPlan.take(pool);
      plan.build(table, dim, keys, deduper, router, links);
      const perRequest = Math.floor((MAX_MESSAGE_BYTES - PULL_REPLY_FIXED) / (4 * dim));
      const distinct = new Set(keys).size;
      expect(plan.n).toBe(keys.length);
      expect(plan.distinct).toBe(distinct);
      // Each segment: a valid request of its shard's keys, within one message's reply.
      const segKeys: BigUint64Array[] = [];
      const seen = new Set<bigint>();
      for (let s = 0; s < shards; s++) {
        for (let g = plan.segBase[s] as number; g < (plan.segBase[s + 1] as number); g++) {
          const req = decodePullRequest(plan.reqs[g] as Uint8Array);
          expect(req.table).toBe(table);
          expect(req.keys.length).toBe(plan.segLen[g]);
          expect(req.keys.length).toBeGreaterThan(0);
          expect(req.keys.length).toBeLessThanOrEqual(perRequest);
          const stray = req.keys.filter((k) => router.shardOf(k) !== s || seen.has(k));
          expect(stray).toEqual(new BigUint64Array(0)); // on its shard, requested once
          for (const k of req.keys) seen.add(k);
          segKeys[g] = req.keys;
        }
      }
      expect(plan.nSeg).toBe(plan.segBase[shards]);
      expect(seen.size).toBe(distinct);
      // Row i of the reply is key i: the segment and float offset the plan says.
      const found = Array.from(keys, (_, i) => {
        const off = plan.offOf[i] as number;
        return (segKeys[plan.segOf[i] as number] as BigUint64Array)[off / dim];
      });
      expect(found).toEqual(Array.from(keys));
      plan.recycle();
    }),
    { numRuns: 150 },
  );
});

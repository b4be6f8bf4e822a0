import fc from 'fast-check';
import { expect, it } from 'vitest';
import { Deduper, halvesOf } from '../src/internal/dedupe.js';

it('Deduper equals a Map of bigints: first-appearance order, every key mapped to its distinct one, its arrays reused across batches', () => {
  const key = fc.oneof(
    fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
    fc.constantFrom(0n, 1n, 2n ** 32n, 2n ** 32n - 1n, 2n ** 63n, 2n ** 64n - 1n),
    fc.nat({ max: 20 }).map(BigInt), // many duplicates
  );
  // One deduper for every batch, as a client uses it: a larger batch before a smaller one
  // must leave nothing behind in the reused probe table.
  const d = new Deduper();
  fc.assert(
    fc.property(fc.array(key, { maxLength: 300 }), (arr) => {
      const keys = BigUint64Array.from(arr);
      const count = d.run(halvesOf(keys), keys.length);
      const first = new Map<bigint, number>();
      for (const k of keys) if (!first.has(k)) first.set(k, first.size);
      expect(count).toBe(first.size);
      expect(Array.from(d.firstAt.subarray(0, count), (i) => keys[i])).toEqual([...first.keys()]);
      expect(Array.from(d.uniqueOf.subarray(0, keys.length))).toEqual(
        Array.from(keys, (k) => first.get(k)),
      );
    }),
    { numRuns: 500 },
  );
});

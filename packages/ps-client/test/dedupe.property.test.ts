import fc from 'fast-check';
import { expect, it } from 'vitest';
import { dedupe } from '../src/internal/dedupe.js';

it('dedupe equals a Map of bigints: first-appearance order, every key mapped to its distinct one', () => {
  const key = fc.oneof(
    fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
    fc.constantFrom(0n, 1n, 2n ** 32n, 2n ** 32n - 1n, 2n ** 63n, 2n ** 64n - 1n),
    fc.nat({ max: 20 }).map(BigInt), // many duplicates
  );
  fc.assert(
    fc.property(fc.array(key, { maxLength: 300 }), (arr) => {
      const keys = BigUint64Array.from(arr);
      const { unique, uniqueOf } = dedupe(keys);
      const first = new Map<bigint, number>();
      for (const k of keys) if (!first.has(k)) first.set(k, first.size);
      expect(Array.from(unique)).toEqual([...first.keys()]);
      expect(Array.from(uniqueOf)).toEqual(Array.from(keys, (k) => first.get(k)));
    }),
    { numRuns: 500 },
  );
});

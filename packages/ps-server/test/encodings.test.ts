import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { counterU32 } from '../src/index.js';
import { crc32c } from '../src/internal/crc32c.js';
import { HALF_TO_FLOAT, toHalf } from '../src/internal/fp16.js';

describe('encodings', () => {
  it('crc32c_matches_the_standard_check_values', () => {
    expect(crc32c(new TextEncoder().encode('123456789'))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
    // incremental = one shot, across the 8-byte fast path boundary
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 100 }), fc.nat(100), (b, cut) => {
        const k = Math.min(cut, b.length);
        expect(crc32c(b.subarray(k), crc32c(b.subarray(0, k)))).toBe(crc32c(b));
      }),
    );
  });

  it('fp16_rounds_to_the_nearest_half_ties_to_even', () => {
    fc.assert(
      fc.property(fc.float({ noNaN: true }), (v) => {
        const h = toHalf(v);
        const got = HALF_TO_FLOAT[h] as number;
        if (Math.abs(v) >= 65520) {
          expect(Math.abs(got)).toBe(Number.POSITIVE_INFINITY);
          return;
        }
        // no other finite half is strictly closer; on a tie the even mantissa wins
        const err = Math.abs(got - v);
        for (const d of [-1, 1]) {
          const n = (h + d) & 0xffff;
          const alt = HALF_TO_FLOAT[n] as number;
          if (!Number.isFinite(alt)) continue;
          expect(err).toBeLessThanOrEqual(Math.abs(alt - v));
          if (err === Math.abs(alt - v) && alt !== got) expect(h & 1).toBe(0);
        }
      }),
      { numRuns: 20000 },
    );
    expect(Number.isNaN(HALF_TO_FLOAT[toHalf(Number.NaN)] as number)).toBe(true);
    expect(HALF_TO_FLOAT[toHalf(1)]).toBe(1);
    expect(HALF_TO_FLOAT[toHalf(-(2 ** -24))]).toBe(-(2 ** -24));
  });

  it('seeded_init_is_a_pure_function_of_seed_key_and_counter', () => {
    expect(counterU32(1, 2, 3, 4)).toBe(counterU32(1, 2, 3, 4));
    const seen = new Set<number>();
    for (let j = 0; j < 1000; j++) seen.add(counterU32(7, 42, 0, j));
    expect(seen.size).toBeGreaterThan(995);
    expect(counterU32(7, 42, 0, 0)).not.toBe(counterU32(8, 42, 0, 0));
    expect(counterU32(7, 42, 0, 0)).not.toBe(counterU32(7, 42, 1, 0));
  });
});

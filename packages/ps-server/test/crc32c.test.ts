import { describe, expect, it } from 'vitest';
import { crc32c, crc32cJs, crc32cRange } from '../src/internal/crc32c.js';
import { loadKernels } from '../src/internal/native.js';

describe('crc32c', () => {
  it('the_check_value_of_123456789_is_e3069283', () => {
    expect(crc32c(new TextEncoder().encode('123456789'))).toBe(0xe3069283);
  });

  it('the_native_crc_equals_the_js_one_for_every_length_offset_and_start_value', () => {
    const native = loadKernels().crc32c;
    const b = new Uint8Array(40_000);
    let x = 12345;
    for (let i = 0; i < b.length; i++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      b[i] = x >>> 24;
    }
    // Around the 3 × 4096-byte stripes the SSE4.2 path joins, and its 8-byte steps.
    const lengths = [0, 1, 7, 8, 9, 511, 512, 4095, 4096, 12287, 12288, 12289, 24583, 36864, 36871];
    for (const n of lengths)
      for (const start of [0, 1, 3, 8, 13])
        for (const init of [0, 1, 0xdeadbeef, 0xffffffff]) {
          const want = crc32cJs(b, start, start + n, init);
          expect(native(b, start, start + n, init)).toBe(want);
          expect(crc32cRange(b, start, start + n, init)).toBe(want);
        }
    // Continuing a CRC over two pieces equals one CRC over both.
    expect(crc32c(b.subarray(5000), crc32c(b.subarray(0, 5000)))).toBe(crc32c(b));
  });

  it('the_native_crc_refuses_a_range_outside_its_array', () => {
    const native = loadKernels().crc32c;
    expect(() => native(new Uint8Array(8), 4, 9, 0)).toThrow(RangeError);
    expect(() => native(new Uint8Array(8), 5, 4, 0)).toThrow(RangeError);
  });
});

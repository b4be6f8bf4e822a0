import fc from 'fast-check';
import { expect, it } from 'vitest';
import {
  decodePushDenseRequest,
  encodePushDenseRequest,
  encodePushDenseRequestInto,
  encodePushRequest,
  PsWireError,
  pushDenseRequestLength,
  pushRequestLength,
  writePushRequestHead,
} from '../src/index.js';

const name = fc.stringMatching(/^[A-Za-z0-9_-]{1,20}$/);

it('writePushRequestHead into a reused, dirty buffer gives the bytes encodePushRequest gives', () => {
  // One buffer for every request, as a client reuses one: each time full of stale bytes.
  const backing = new ArrayBuffer(1 << 16);
  fc.assert(
    fc.property(
      name,
      name,
      fc.integer({ min: 0, max: 2 ** 53 - 1 }),
      fc.integer({ min: 1, max: 16 }),
      fc.array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { maxLength: 40 }),
      fc.integer({ min: 1, max: 255 }),
      (table, writer, seq, dim, keyList, junk) => {
        const keys = BigUint64Array.from(keyList);
        const grads = Float32Array.from({ length: keys.length * dim }, (_, i) => i * 0.5 - 3);
        const want = encodePushRequest({ table, writer, seq, dim, keys, grads });
        new Uint8Array(backing).fill(junk);
        const count = keys.length;
        const out = new Uint8Array(backing, 0, pushRequestLength(table, writer, count, dim));
        const at = writePushRequestHead(out, { table, writer, seq, dim, count });
        new BigUint64Array(backing, at, count).set(keys);
        new Float32Array(backing, at + 8 * count, count * dim).set(grads);
        expect(out).toEqual(want);
      },
    ),
    { numRuns: 300 },
  );
});

it('writePushRequestHead refuses a buffer of the wrong length or alignment, typed', () => {
  const h = { table: 't', writer: 'w', seq: 1, dim: 2, count: 3 };
  const len = pushRequestLength('t', 'w', 3, 2);
  for (const out of [
    new Uint8Array(len - 1),
    new Uint8Array(len + 1),
    new Uint8Array(new ArrayBuffer(len + 4), 4, len),
  ]) {
    expect(() => writePushRequestHead(out, h)).toThrow(PsWireError);
  }
  expect(() => writePushRequestHead(new Uint8Array(len), { ...h, dim: 0 })).toThrow(
    expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }),
  );
});

it('encodePushDenseRequestInto a reused, dirty buffer gives the bytes encodePushDenseRequest gives', () => {
  const backing = new ArrayBuffer(1 << 14);
  fc.assert(
    fc.property(
      name,
      name,
      fc.integer({ min: 0, max: 2 ** 53 - 1 }),
      fc.integer({ min: 0, max: 64 }),
      fc.integer({ min: 1, max: 255 }),
      (dense, writer, seq, n, junk) => {
        const grads = Float32Array.from({ length: n }, (_, i) => i * 0.25 - 1);
        const want = encodePushDenseRequest({ name: dense, writer, seq, grads });
        new Uint8Array(backing).fill(junk);
        const out = new Uint8Array(backing, 0, pushDenseRequestLength(dense, writer, n));
        encodePushDenseRequestInto(out, { name: dense, writer, seq, grads });
        expect(out).toEqual(want);
        expect(decodePushDenseRequest(out).grads).toEqual(grads);
      },
    ),
    { numRuns: 300 },
  );
  const grads = new Float32Array(4);
  const req = { name: 'd', writer: 'w', seq: 1, grads };
  expect(() => encodePushDenseRequestInto(new Uint8Array(8), req)).toThrow(PsWireError);
});

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  allocatePullRequest,
  decodePullDenseReply,
  decodePullDenseRequest,
  decodePullReply,
  decodePullRequest,
  decodePushDenseRequest,
  decodePushReply,
  decodePushRequest,
  decodeTableInfoReply,
  decodeTableInfoRequest,
  encodePullDenseReply,
  encodePullDenseRequest,
  encodePullReply,
  encodePullRequest,
  encodePushDenseRequest,
  encodePushReply,
  encodePushRequest,
  encodeTableInfoReply,
  encodeTableInfoRequest,
  PsMessageKind,
  PsWireError,
  pullDenseReplyInto,
  pullDenseReplyLength,
  pullReplyInto,
  pullReplyLength,
  pullRequestLength,
  writePullRequestHead,
} from '../src/index.js';

const nameArb = fc.stringMatching(/^[A-Za-z0-9_.-]{1,40}$/);
const writerArb = fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/);
const keysArb = fc
  .array(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { maxLength: 64 })
  .map((a) => BigUint64Array.from(a));
// Any float32 bit pattern, NaN payloads included: compared as bits.
const floatsArb = (n: number) =>
  fc.array(fc.integer({ min: 0, max: 0xffff_ffff }), { minLength: n, maxLength: n }).map((a) => {
    const u = Uint32Array.from(a);
    return new Float32Array(u.buffer);
  });
const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));

/** Decoding at an odd byte offset must give the same (a copy instead of a view). */
function shifted(b: Uint8Array): Uint8Array {
  const buf = new Uint8Array(b.length + 3);
  buf.set(b, 3);
  return buf.subarray(3);
}

describe('ps-wire round trips', () => {
  it('pull request', () => {
    fc.assert(
      fc.property(nameArb, keysArb, (table, keys) => {
        const b = encodePullRequest({ table, keys });
        for (const x of [b, shifted(b)]) {
          const d = decodePullRequest(x);
          expect(d.table).toBe(table);
          expect(Array.from(d.keys)).toEqual(Array.from(keys));
        }
      }),
    );
  });

  it('pull requests filled in place equal the encoded ones', () => {
    fc.assert(
      fc.property(nameArb, keysArb, (table, keys) => {
        const r = allocatePullRequest(table, keys.length);
        expect(r.keys.length).toBe(keys.length);
        expect(r.keys.byteOffset % 8).toBe(0);
        expect(r.keys.buffer).toBe(r.bytes.buffer);
        r.keys.set(keys);
        expect(Array.from(r.bytes)).toEqual(Array.from(encodePullRequest({ table, keys })));
        expect(Array.from(decodePullRequest(r.bytes).keys)).toEqual(Array.from(keys));
      }),
    );
  });

  it('pull requests written over a reused buffer (old bytes in it) equal the encoded ones', () => {
    fc.assert(
      fc.property(nameArb, keysArb, fc.integer({ min: 0, max: 255 }), (table, keys, junk) => {
        const len = pullRequestLength(table, keys.length);
        const buf = new Uint8Array(len + 24).fill(junk);
        const at = writePullRequestHead(buf, table, keys.length);
        expect(at % 8).toBe(0);
        new BigUint64Array(buf.buffer, at, keys.length).set(keys);
        const req = buf.subarray(0, len);
        expect(Array.from(req)).toEqual(Array.from(encodePullRequest({ table, keys })));
        expect(Array.from(decodePullRequest(req).keys)).toEqual(Array.from(keys));
      }),
    );
  });

  it('a pull request head refuses a buffer too short for it, typed', () => {
    const short = new Uint8Array(pullRequestLength('t', 4) - 1);
    expect(() => writePullRequestHead(short, 't', 4)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }),
    );
    expect(() => writePullRequestHead(new Uint8Array(64), 'bad name!', 1)).toThrow(PsWireError);
  });

  it('pull reply', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 16 }),
        fc.integer({ min: 0, max: 16 }),
        (dim, count) => {
          const rows = new Float32Array(count * dim).map((_, i) => i * 0.5 - 3);
          const b = encodePullReply({ dim, rows });
          for (const x of [b, shifted(b)]) {
            const d = decodePullReply(x);
            expect([d.dim, d.count]).toEqual([dim, count]);
            expect(bits(d.rows)).toEqual(bits(rows));
          }
        },
      ),
    );
  });

  it('pull replies built in place (at an offset of a larger buffer) equal the encoded ones', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 16 }),
        fc.integer({ min: 0, max: 16 }),
        fc.integer({ min: 0, max: 8 }),
        (dim, count, slot) => {
          const rows = new Float32Array(count * dim).map((_, i) => i * 0.25 - 1);
          // Garbage around and under it: the fixed part must be written whole.
          const big = new Uint8Array(8 + 4 * slot + pullReplyLength(count, dim) + 8).fill(0xab);
          const at = 4 * slot + 4; // 4-aligned, as a reply payload 20 bytes into a block is
          const bytes = big.subarray(at, at + pullReplyLength(count, dim));
          pullReplyInto(bytes, count, dim).set(rows);
          expect(Buffer.from(bytes).equals(Buffer.from(encodePullReply({ dim, rows })))).toBe(true);
          const dense = big.subarray(at, at + pullDenseReplyLength(rows.length));
          pullDenseReplyInto(dense, rows.length).set(rows);
          expect(bits(decodePullDenseReply(dense))).toEqual(bits(rows));
          expect(() =>
            pullReplyInto(big.subarray(at + 1, at + 1 + bytes.length), count, dim),
          ).toThrow(/4-aligned/);
          expect(() => pullReplyInto(bytes.subarray(1), count, dim)).toThrow(/exactly/);
        },
      ),
    );
  });

  it('push request, NaN payloads and all', () => {
    fc.assert(
      fc.property(
        nameArb,
        writerArb,
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
        fc.integer({ min: 1, max: 8 }),
        keysArb.filter((k) => k.length > 0),
        (table, writer, seq, dim, keys) => {
          const grads = new Float32Array(keys.length * dim);
          new Uint32Array(grads.buffer).forEach((_, i, a) => {
            a[i] = (i * 2654435761) >>> 0;
          });
          const b = encodePushRequest({ table, writer, seq, dim, keys, grads });
          for (const x of [b, shifted(b)]) {
            const d = decodePushRequest(x);
            expect([d.table, d.writer, d.seq, d.dim]).toEqual([table, writer, seq, dim]);
            expect(Array.from(d.keys)).toEqual(Array.from(keys));
            expect(bits(d.grads)).toEqual(bits(grads));
          }
        },
      ),
    );
  });

  it('push replies', () => {
    fc.assert(
      fc.property(
        fc.boolean(),
        fc.nat({ max: 0xffff_ffff }),
        fc.nat({ max: 0xffff_ffff }),
        fc.constantFrom(PsMessageKind.PushReply, PsMessageKind.PushDenseReply),
        (applied, rows, dropped, kind) => {
          const r = { applied, duplicate: !applied, rows, dropped };
          expect(decodePushReply(encodePushReply(r, kind), kind)).toEqual(r);
        },
      ),
    );
  });

  it('dense messages', () => {
    fc.assert(
      fc.property(
        nameArb,
        writerArb,
        fc.nat(),
        fc.integer({ min: 0, max: 40 }).chain((n) => floatsArb(n)),
        (name, writer, seq, grads) => {
          expect(decodePullDenseRequest(encodePullDenseRequest({ name }))).toEqual({ name });
          expect(bits(decodePullDenseReply(shifted(encodePullDenseReply(grads))))).toEqual(
            bits(grads),
          );
          const d = decodePushDenseRequest(
            shifted(encodePushDenseRequest({ name, writer, seq, grads })),
          );
          expect([d.name, d.writer, d.seq]).toEqual([name, writer, seq]);
          expect(bits(d.grads)).toEqual(bits(grads));
        },
      ),
    );
  });

  it('table info', () => {
    const seed = fc.nat({ max: 0xffff_ffff });
    const f = fc.double({ min: -10, max: 10, noNaN: true, noDefaultInfinity: true });
    const init = fc.oneof(
      fc.constant({ kind: 'zeros' as const }),
      fc.tuple(seed, f, fc.double({ min: 0.001, max: 5, noNaN: true })).map(([s, low, w]) => ({
        kind: 'uniform' as const,
        seed: s,
        low,
        high: low + w,
      })),
      fc.tuple(seed, f, fc.double({ min: 0, max: 5, noNaN: true })).map(([s, mean, std]) => ({
        kind: 'normal' as const,
        seed: s,
        mean,
        std,
      })),
    );
    const entry = fc.record(
      {
        name: nameArb,
        dim: fc.integer({ min: 1, max: 4096 }),
        rejectNonFinite: fc.boolean(),
        init,
        // A readable table's read descriptor: opaque bytes, carried exactly.
        readDescriptor: fc.uint8Array({ minLength: 1, maxLength: 256 }),
      },
      { requiredKeys: ['name', 'dim', 'rejectNonFinite', 'init'] },
    );
    const dense = fc.record({
      name: nameArb,
      length: fc.integer({ min: 1, max: 1 << 20 }),
      rejectNonFinite: fc.boolean(),
    });
    fc.assert(
      fc.property(
        writerArb,
        fc.nat({ max: 0xffff_ffff }),
        fc.array(entry, { maxLength: 6 }),
        fc.array(dense, { maxLength: 6 }),
        (shardId, maxBatchKeys, tables, d) => {
          const info = { shardId, maxBatchKeys, tables, dense: d };
          expect(decodeTableInfoReply(shifted(encodeTableInfoReply(info)))).toEqual(info);
        },
      ),
    );
    expect(() => decodeTableInfoRequest(encodeTableInfoRequest())).not.toThrow();
  });

  it('table info: a read descriptor is refused when empty, too long, or its reserved bytes are set', () => {
    const init = { kind: 'zeros' as const };
    const table = { name: 'emb', dim: 4, rejectNonFinite: false, init };
    const info = (readDescriptor: Uint8Array) => ({
      shardId: 's',
      maxBatchKeys: 8,
      tables: [{ ...table, readDescriptor }],
      dense: [],
    });
    expect(() => encodeTableInfoReply(info(new Uint8Array(0)))).toThrow(/readDescriptor/);
    expect(() => encodeTableInfoReply(info(new Uint8Array(257)))).toThrow(/readDescriptor/);
    const ok = encodeTableInfoReply(info(new Uint8Array(32).fill(7)));
    // Entry: 16 fixed + 8 (shard id "s", padded) = 24; its 8 + 24 init bytes; then the read part.
    const at = 24 + 8 + 24;
    const long = ok.slice();
    new DataView(long.buffer).setUint16(at, 300, true);
    expect(() => decodeTableInfoReply(long)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_FIELD' }),
    );
    const reserved = ok.slice();
    reserved[at + 4] = 1;
    expect(() => decodeTableInfoReply(reserved)).toThrow();
    const past = ok.slice();
    new DataView(past.buffer).setUint16(at, 200, true); // runs past the reply
    expect(() => decodeTableInfoReply(past)).toThrow();
    expect(decodeTableInfoReply(ok).tables[0]?.readDescriptor).toEqual(new Uint8Array(32).fill(7));
  });
});

const decoders: [string, (b: Uint8Array) => unknown, () => Uint8Array][] = [
  [
    'pull request',
    (b) => decodePullRequest(b),
    () => encodePullRequest({ table: 'emb', keys: BigUint64Array.of(1n, 2n, 3n) }),
  ],
  [
    'pull reply',
    (b) => decodePullReply(b),
    () => encodePullReply({ dim: 2, rows: new Float32Array(6) }),
  ],
  [
    'push request',
    (b) => decodePushRequest(b),
    () =>
      encodePushRequest({
        table: 'emb',
        writer: 'w1',
        seq: 7,
        dim: 2,
        keys: BigUint64Array.of(1n, 9n),
        grads: new Float32Array(4),
      }),
  ],
  [
    'push reply',
    (b) => decodePushReply(b),
    () => encodePushReply({ applied: true, duplicate: false, rows: 2, dropped: 0 }),
  ],
  [
    'dense pull request',
    (b) => decodePullDenseRequest(b),
    () => encodePullDenseRequest({ name: 'w0' }),
  ],
  [
    'dense pull reply',
    (b) => decodePullDenseReply(b),
    () => encodePullDenseReply(new Float32Array(5)),
  ],
  [
    'dense push request',
    (b) => decodePushDenseRequest(b),
    () => encodePushDenseRequest({ name: 'w0', writer: 'w1', seq: 3, grads: new Float32Array(5) }),
  ],
  ['table-info request', (b) => decodeTableInfoRequest(b), () => encodeTableInfoRequest()],
  [
    'table-info reply',
    (b) => decodeTableInfoReply(b),
    () =>
      encodeTableInfoReply({
        shardId: 's0',
        maxBatchKeys: 4096,
        tables: [
          {
            name: 'emb',
            dim: 8,
            rejectNonFinite: true,
            init: { kind: 'normal', seed: 3, mean: 0, std: 0.1 },
          },
        ],
        dense: [{ name: 'w0', length: 5, rejectNonFinite: false }],
      }),
  ],
];

/** Any input gives a value or a PsWireError with a code and an in-range offset: never anything else. */
function decodeOrWireError(
  decode: (b: Uint8Array) => unknown,
  b: Uint8Array,
): PsWireError | undefined {
  try {
    decode(b);
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(PsWireError);
    const e = err as PsWireError;
    expect(e.code).toMatch(/^ERR_PS_WIRE_/);
    expect(e.offset).toBeGreaterThanOrEqual(0);
    expect(e.offset).toBeLessThanOrEqual(Math.max(b.length, 24));
    return e;
  }
}

describe('ps-wire hostile bytes', () => {
  for (const [what, decode, valid] of decoders) {
    it(`${what}: random bytes give a value or a typed error`, () => {
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 96 }), fc.nat({ max: 10 }), (raw, kind) => {
          const b = raw.slice();
          if (b.length > 1) {
            b[0] = 1;
            b[1] = kind;
          }
          decodeOrWireError(decode, b);
        }),
        { numRuns: 2000 },
      );
    });

    it(`${what}: every truncation is ERR_PS_WIRE_TRUNCATED, trailing bytes ERR_PS_WIRE_TRAILING`, () => {
      const b = valid();
      for (let n = 0; n < b.length; n++) {
        expect(decodeOrWireError(decode, b.subarray(0, n))?.code).toBe('ERR_PS_WIRE_TRUNCATED');
      }
      const longer = new Uint8Array(b.length + 1);
      longer.set(b);
      expect(decodeOrWireError(decode, longer)?.code).toBe('ERR_PS_WIRE_TRAILING');
    });

    it(`${what}: mutated valid messages give a value or a typed error`, () => {
      const base = valid();
      fc.assert(
        fc.property(
          fc.array(fc.tuple(fc.nat({ max: base.length - 1 }), fc.integer({ min: 0, max: 255 })), {
            minLength: 1,
            maxLength: 4,
          }),
          (edits) => {
            const b = base.slice();
            for (const [i, x] of edits) b[i] = x;
            decodeOrWireError(decode, b);
          },
        ),
        { numRuns: 2000 },
      );
    });
  }

  it('a push of no keys is refused (it would take a writer slot for nothing)', () => {
    const b = encodePushRequest({
      table: 'emb',
      writer: 'w0',
      seq: 1,
      dim: 1,
      keys: new BigUint64Array(0),
      grads: new Float32Array(0),
    });
    const e = decodeOrWireError((x) => decodePushRequest(x), b);
    expect([e?.code, e?.offset]).toEqual(['ERR_PS_WIRE_FIELD', 8]);
  });

  it('a huge declared count is refused before anything is allocated', () => {
    const b = encodePullRequest({ table: 'emb', keys: new BigUint64Array(0) });
    new DataView(b.buffer).setUint32(8, 0xffff_ffff, true);
    const e = decodeOrWireError((x) => decodePullRequest(x), b);
    expect([e?.code, e?.offset]).toEqual(['ERR_PS_WIRE_TOO_LARGE', 8]);
    const r = encodePullReply({ dim: 4096, rows: new Float32Array(0) });
    new DataView(r.buffer).setUint32(8, 1 << 20, true);
    expect(decodeOrWireError((x) => decodePullReply(x), r)?.code).toBe('ERR_PS_WIRE_TOO_LARGE');
  });

  it('a sequence past 2^53 − 1 and a bad name are field errors at their offsets', () => {
    const b = encodePushRequest({
      table: 'emb',
      writer: 'w',
      seq: 1,
      dim: 1,
      keys: BigUint64Array.of(1n),
      grads: new Float32Array(1),
    });
    new DataView(b.buffer).setBigUint64(16, 2n ** 53n, true);
    const e = decodeOrWireError((x) => decodePushRequest(x), b);
    expect([e?.code, e?.offset]).toEqual(['ERR_PS_WIRE_FIELD', 16]);
    const p = encodePullRequest({ table: 'emb', keys: new BigUint64Array(0) });
    p[17] = 0x20; // a space in the name
    expect(decodeOrWireError((x) => decodePullRequest(x), p)?.code).toBe('ERR_PS_WIRE_FIELD');
  });

  it('encoders refuse what they cannot represent', () => {
    expect(() => allocatePullRequest('bad name', 1)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }),
    );
    expect(() => allocatePullRequest('t', -1)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }),
    );
    expect(() => encodePullRequest({ table: 'bad name', keys: new BigUint64Array(0) })).toThrow(
      expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }),
    );
    expect(() =>
      encodePushRequest({
        table: 't',
        writer: 'w',
        seq: 1,
        dim: 2,
        keys: BigUint64Array.of(1n),
        grads: new Float32Array(3),
      }),
    ).toThrow(expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }));
    expect(() =>
      encodePushRequest({
        table: 't',
        writer: 'w',
        seq: -1,
        dim: 1,
        keys: BigUint64Array.of(1n),
        grads: new Float32Array(1),
      }),
    ).toThrow(expect.objectContaining({ code: 'ERR_PS_WIRE_INVALID_ARG' }));
  });
});

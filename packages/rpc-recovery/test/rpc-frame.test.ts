import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeRpcFrame,
  encodeRequestHeader,
  encodeRequestHeaderInto,
  encodeResponseHeader,
  encodeResponseHeaderInto,
  REQUEST_HEADER_BYTES,
  RpcDecodeError,
  RpcError,
  type RpcFrameLimits,
  type RpcRequestHeader,
  type RpcResponseHeader,
  RpcStatus,
  remoteErrorOf,
  requestHeaderLength,
  responseHeaderLength,
  rpcFrameLength,
  rpcFrameLimits,
} from '../src/index.js';

const LIMITS = rpcFrameLimits({
  maxPayloadBytes: 4096,
  maxMethodBytes: 32,
  maxErrorMessageBytes: 64,
});

const utf8 = new TextEncoder();
const methodArb = fc.stringMatching(/^[A-Za-z0-9_.:/-]{1,32}$/);
const requestArb: fc.Arbitrary<RpcRequestHeader> = fc.record({
  requestId: fc.integer({ min: 0, max: 0xffff_ffff }),
  sessionSeq: fc.maxSafeNat(),
  ackBelow: fc.maxSafeNat(),
  epoch: fc.integer({ min: 1, max: 0xffff_ffff }),
  idempotent: fc.boolean(),
  deadlineMs: fc.integer({ min: 1, max: LIMITS.maxDeadlineMs }),
  method: methodArb,
  payloadLength: fc.constant(0),
});
const errorResponseArb: fc.Arbitrary<RpcResponseHeader> = fc.record({
  requestId: fc.integer({ min: 0, max: 0xffff_ffff }),
  epoch: fc.integer({ min: 1, max: 0xffff_ffff }),
  status: fc.constantFrom(RpcStatus.Error, RpcStatus.Rejected, RpcStatus.Unknown),
  errorCode: fc.stringMatching(/^[A-Z0-9_]{1,64}$/),
  // 16 graphemes can exceed the 64-byte limit (combining marks, emoji sequences): by bytes.
  errorMessage: fc
    .string({ unit: 'grapheme', maxLength: 16 })
    .filter((s) => utf8.encode(s).length <= LIMITS.maxErrorMessageBytes),
  payloadLength: fc.constant(0),
});
const okResponseArb: fc.Arbitrary<RpcResponseHeader> = fc.record({
  requestId: fc.integer({ min: 0, max: 0xffff_ffff }),
  epoch: fc.integer({ min: 1, max: 0xffff_ffff }),
  status: fc.constant(RpcStatus.Ok),
  errorCode: fc.constant(''),
  errorMessage: fc.constant(''),
  payloadLength: fc.constant(0),
});

const concat = (a: Uint8Array, b: Uint8Array): Uint8Array => {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
};

function frameOf(
  h: RpcRequestHeader | RpcResponseHeader,
  payload: Uint8Array,
  limits: RpcFrameLimits = LIMITS,
): Uint8Array {
  const withLength = { ...h, payloadLength: payload.length };
  const header =
    'method' in withLength
      ? encodeRequestHeader(withLength as RpcRequestHeader, limits)
      : encodeResponseHeader(withLength as RpcResponseHeader, limits);
  return concat(header, payload);
}

/** Decoding any bytes either succeeds (and re-encodes to the same bytes) or throws a typed decode error. */
function decodeOrTypedError(bytes: Uint8Array): void {
  let frame: ReturnType<typeof decodeRpcFrame>;
  try {
    frame = decodeRpcFrame(bytes, LIMITS);
  } catch (err) {
    expect(err).toBeInstanceOf(RpcDecodeError);
    expect(['ERR_RPC_PROTOCOL', 'ERR_RPC_FRAME_TOO_LARGE']).toContain((err as RpcDecodeError).code);
    expect((err as RpcDecodeError).offset).toBeGreaterThanOrEqual(0);
    expect((err as RpcDecodeError).offset).toBeLessThanOrEqual(bytes.length);
    return;
  }
  expect(frameOf(frame.header, frame.payload)).toEqual(bytes);
}

describe('RPC frame codec', () => {
  it('requests round trip, the payload a view of the input', () => {
    fc.assert(
      fc.property(requestArb, fc.uint8Array({ maxLength: 64 }), (h, payload) => {
        const bytes = frameOf(h, payload);
        const f = decodeRpcFrame(bytes, LIMITS);
        expect(f.kind).toBe('request');
        expect(f.header).toEqual({ ...h, payloadLength: payload.length });
        expect(f.payload).toEqual(payload);
        expect(f.payload.buffer).toBe(bytes.buffer);
        expect(rpcFrameLength(bytes.subarray(0, REQUEST_HEADER_BYTES), LIMITS)).toBe(bytes.length);
      }),
    );
  });

  it('method names are found again from their bytes: a name one byte off, a bad byte or a 17th name still decode (or fail) as themselves', () => {
    const frame = (method: string) => {
      const h = encodeRequestHeader(
        {
          requestId: 1,
          sessionSeq: 0,
          ackBelow: 0,
          epoch: 1,
          idempotent: true,
          deadlineMs: 100,
          method,
          payloadLength: 0,
        },
        LIMITS,
      );
      return h;
    };
    const method = (b: Uint8Array) => {
      const f = decodeRpcFrame(b, LIMITS);
      if (f.kind !== 'request') throw new Error('not a request');
      return f.header.method;
    };
    const first = method(frame('ps.pull'));
    expect(first).toBe('ps.pull');
    // The same bytes again: the same name; bytes one off: their own name.
    expect(method(frame('ps.pull'))).toBe('ps.pull');
    expect(method(frame('ps.pulm'))).toBe('ps.pulm');
    expect(method(frame('ps.pul'))).toBe('ps.pul');
    // A byte no name may hold, at a kept name's length, is refused as before.
    const bad = frame('ps.pull');
    bad[REQUEST_HEADER_BYTES + 6] = 0x20;
    expect(() => decodeRpcFrame(bad, LIMITS)).toThrow(RpcDecodeError);
    // More names than are kept: every one still decodes as itself.
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 40; i++) expect(method(frame(`m${i}`))).toBe(`m${i}`);
    }
    expect(method(frame('ps.pull'))).toBe('ps.pull');
  });

  it('responses round trip', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.tuple(okResponseArb, fc.uint8Array({ maxLength: 64 })),
          fc.tuple(errorResponseArb, fc.constant(new Uint8Array(0))),
        ),
        ([h, payload]) => {
          const bytes = frameOf(h, payload);
          const f = decodeRpcFrame(bytes, LIMITS);
          expect(f).toEqual({
            kind: 'response',
            header: { ...h, payloadLength: payload.length },
            payload,
          });
        },
      ),
    );
  });

  it('hostile random bytes give a frame or a typed decode error, nothing else', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 128 }), fc.constantFrom(0, 1, 2), (bytes, kind) => {
        if (kind > 0 && bytes.length > 1) {
          bytes[0] = kind; // get past the kind byte more often
          bytes[1] = 1;
        }
        decodeOrTypedError(bytes);
      }),
      { numRuns: 2000 },
    );
  });

  it('mutated, truncated and extended valid frames give typed errors or valid frames', () => {
    const validArb = fc.oneof(
      fc.tuple(requestArb, fc.uint8Array({ maxLength: 32 })).map(([h, p]) => frameOf(h, p)),
      fc.tuple(okResponseArb, fc.uint8Array({ maxLength: 32 })).map(([h, p]) => frameOf(h, p)),
      errorResponseArb.map((h) => frameOf(h, new Uint8Array(0))),
    );
    fc.assert(
      fc.property(
        validArb,
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 1, max: 255 })), { maxLength: 4 }),
        fc.integer({ min: -8, max: 8 }),
        (frame, flips, resize) => {
          const bytes = frame.slice();
          for (const [at, x] of flips)
            bytes[at % bytes.length] = (bytes[at % bytes.length] as number) ^ x;
          const sized =
            resize < 0
              ? bytes.subarray(0, Math.max(0, bytes.length + resize))
              : concat(bytes, new Uint8Array(resize));
          decodeOrTypedError(sized);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('headers written in place at an offset equal the standalone encoding', () => {
    fc.assert(
      fc.property(
        fc.oneof(requestArb, okResponseArb, errorResponseArb),
        fc.nat(16),
        (h, offset) => {
          const isRequest = 'method' in h;
          const standalone = isRequest
            ? encodeRequestHeader(h as RpcRequestHeader, LIMITS)
            : encodeResponseHeader(h as RpcResponseHeader, LIMITS);
          const length = isRequest
            ? requestHeaderLength((h as RpcRequestHeader).method)
            : responseHeaderLength(
                (h as RpcResponseHeader).errorCode,
                (h as RpcResponseHeader).errorMessage,
              );
          expect(length).toBe(standalone.length);
          const block = new Uint8Array(offset + length + 3).fill(0xaa);
          const written = isRequest
            ? encodeRequestHeaderInto(block, offset, h as RpcRequestHeader, LIMITS)
            : encodeResponseHeaderInto(block, offset, h as RpcResponseHeader, LIMITS);
          expect(written).toBe(length);
          expect(block.subarray(offset, offset + length)).toEqual(standalone);
          expect(block.subarray(0, offset).every((b) => b === 0xaa)).toBe(true);
          expect(block.subarray(offset + length).every((b) => b === 0xaa)).toBe(true);
          const short = new Uint8Array(offset + length - 1);
          const into = () =>
            isRequest
              ? encodeRequestHeaderInto(short, offset, h as RpcRequestHeader, LIMITS)
              : encodeResponseHeaderInto(short, offset, h as RpcResponseHeader, LIMITS);
          expect(into).toThrow(expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }));
        },
      ),
    );
  });

  it('a frame declaring a huge payload is refused from its fixed header alone', () => {
    const header = encodeRequestHeader(
      {
        requestId: 1,
        sessionSeq: 0,
        ackBelow: 0,
        epoch: 1,
        idempotent: true,
        deadlineMs: 100,
        method: 'pull',
        payloadLength: 16,
      },
      LIMITS,
    );
    new DataView(header.buffer).setUint32(36, 0xffff_ffff);
    expect(() => rpcFrameLength(header.subarray(0, REQUEST_HEADER_BYTES), LIMITS)).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_FRAME_TOO_LARGE', offset: 36 }),
    );
  });

  it('names the offset of each bad field', () => {
    const req = frameOf(
      {
        requestId: 7,
        sessionSeq: 3,
        ackBelow: 2,
        epoch: 1,
        idempotent: false,
        deadlineMs: 50,
        method: 'counter.add',
        payloadLength: 0,
      },
      new Uint8Array([1]),
    );
    const res = frameOf(
      {
        requestId: 7,
        epoch: 1,
        status: RpcStatus.Error,
        errorCode: 'ERR_X',
        errorMessage: 'bad',
        payloadLength: 0,
      },
      new Uint8Array(0),
    );
    const cases: [Uint8Array, number, number, string][] = [
      [req, 0, 9, 'ERR_RPC_PROTOCOL'], // kind
      [req, 1, 1, 'ERR_RPC_PROTOCOL'], // version (1: no method padding)
      [req, 3, 2, 'ERR_RPC_PROTOCOL'], // unknown flag
      [req, 8, 0xff, 'ERR_RPC_PROTOCOL'], // sessionSeq beyond 2^53
      [req, 27, 0, 'ERR_RPC_PROTOCOL'], // epoch 0
      [req, 33, 200, 'ERR_RPC_FRAME_TOO_LARGE'], // method length
      [req, 35, 1, 'ERR_RPC_PROTOCOL'], // reserved
      [req, REQUEST_HEADER_BYTES + 2, 0x20, 'ERR_RPC_PROTOCOL'], // space in a method
      [req, REQUEST_HEADER_BYTES + 12, 1, 'ERR_RPC_PROTOCOL'], // method padding not zero
      [res, 2, 9, 'ERR_RPC_PROTOCOL'], // status
      [res, 2, 0, 'ERR_RPC_PROTOCOL'], // ok with an error code
      [res, 20, 0x61, 'ERR_RPC_PROTOCOL'], // lower case in a code
      [res, 25, 0xff, 'ERR_RPC_PROTOCOL'], // message not UTF-8
    ];
    const offsets: Record<string, number> = {};
    for (const [frame, at, value, code] of cases) {
      const bad = frame.slice();
      bad[at] = value;
      let err: unknown;
      try {
        decodeRpcFrame(bad, LIMITS);
      } catch (e) {
        err = e;
      }
      expect(err, `byte ${at} = ${value}`).toBeInstanceOf(RpcDecodeError);
      expect((err as RpcDecodeError).code).toBe(code);
      offsets[`${at}`] = (err as RpcDecodeError).offset;
    }
    expect(offsets).toMatchObject({
      0: 0,
      1: 1,
      3: 2,
      8: 8,
      27: 24,
      33: 32,
      35: 34,
      42: 42,
      52: 52,
      20: 20,
      25: 25,
    });
    expect(() => decodeRpcFrame(req.subarray(0, req.length - 1), LIMITS)).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_PROTOCOL', offset: req.length - 1 }),
    );
    expect(() => decodeRpcFrame(concat(req, new Uint8Array(1)), LIMITS)).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_PROTOCOL', offset: req.length }),
    );
  });

  it('remote errors carry a stable code and one line of message, never a stack', () => {
    const err = Object.assign(new Error('table 3 unknown\n    at secret (/srv/app.js:1:1)'), {
      code: 'ERR_PS_UNKNOWN_TABLE',
      secret: 'k',
    });
    expect(remoteErrorOf(err)).toEqual({
      code: 'ERR_PS_UNKNOWN_TABLE',
      message: 'table 3 unknown',
    });
    expect(remoteErrorOf(new TypeError('x'))).toEqual({ code: 'ERR_RPC_REMOTE', message: 'x' });
    expect(remoteErrorOf({ code: 'lower', message: 'hidden' })).toEqual({
      code: 'ERR_RPC_REMOTE',
      message: '',
    });
    const hostile = {
      get code(): string {
        throw new Error('boom');
      },
    };
    expect(remoteErrorOf(hostile)).toEqual({ code: 'ERR_RPC_REMOTE', message: '' });
    const long = remoteErrorOf(new Error('é'.repeat(100)), LIMITS);
    expect(long.message).toBe('é'.repeat(32)); // 64 bytes, cut on a character boundary
    const frame = frameOf(
      {
        requestId: 1,
        epoch: 1,
        status: RpcStatus.Error,
        errorCode: long.code,
        errorMessage: long.message,
        payloadLength: 0,
      },
      new Uint8Array(0),
    );
    expect(decodeRpcFrame(frame, LIMITS).header).toMatchObject({
      errorCode: long.code,
      errorMessage: long.message,
    });
  });

  it('bad headers to encode and bad limits are typed mistakes', () => {
    const good: RpcRequestHeader = {
      requestId: 1,
      sessionSeq: 0,
      ackBelow: 0,
      epoch: 1,
      idempotent: true,
      deadlineMs: 10,
      method: 'm',
      payloadLength: 0,
    };
    const bad: Partial<RpcRequestHeader>[] = [
      { method: '' },
      { method: 'a b' },
      { method: 'x'.repeat(33) },
      { epoch: 0 },
      { deadlineMs: 0 },
      { sessionSeq: -1 },
      { payloadLength: 4097 },
      { idempotent: 1 as never },
    ];
    for (const b of bad) {
      expect(() => encodeRequestHeader({ ...good, ...b }, LIMITS)).toThrow(
        expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
      );
    }
    const okRes: RpcResponseHeader = {
      requestId: 1,
      epoch: 1,
      status: RpcStatus.Ok,
      errorCode: '',
      errorMessage: '',
      payloadLength: 0,
    };
    for (const b of [
      { errorCode: 'X' },
      { status: RpcStatus.Error },
      { status: RpcStatus.Error, errorCode: 'X', payloadLength: 1 },
      { status: 9 as never },
    ]) {
      expect(() => encodeResponseHeader({ ...okRes, ...b }, LIMITS)).toThrow(RpcError);
    }
    expect(() => rpcFrameLimits({ maxMethodBytes: 5000 })).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
    );
    expect(() => decodeRpcFrame('x' as never)).toThrow(
      expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
    );
  });
});

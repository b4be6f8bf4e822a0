import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeSessionFrame,
  encodeSessionFrame,
  RpcDecodeError,
  SESSION_FRAME_VERSION,
  type SessionFrame,
  SessionFrameKind,
} from '../src/index.js';

const id = 'ab'.repeat(16);
const bytes32 = (v: number) => new Uint8Array(32).fill(v);

describe('session control frames', () => {
  it('every_frame_round_trips', () => {
    const frames: SessionFrame[] = [
      { kind: 'open' },
      { kind: 'bye' },
      { kind: 'resume', sessionId: id, lastEpoch: 7 },
      { kind: 'challenge', challenge: bytes32(1) },
      { kind: 'proof', proof: bytes32(2) },
      {
        kind: 'welcome',
        sessionId: id,
        epoch: 1,
        token: bytes32(3),
        floor: 0,
        done: [],
        running: [],
      },
      {
        kind: 'welcome',
        sessionId: id,
        epoch: 9,
        token: undefined,
        floor: 2 ** 40,
        done: [2 ** 40, 2 ** 40 + 3],
        running: [2 ** 40 + 5],
      },
      { kind: 'refused', code: 'ERR_RPC_AUTH', message: 'nope – non-ASCII ok' },
      { kind: 'ping', nonce: 0xffff_ffff },
      { kind: 'pong', nonce: 1 },
    ];
    for (const f of frames) expect(decodeSessionFrame(encodeSessionFrame(f))).toEqual(f);
  });

  it('resume_frame_has_the_documented_bytes', () => {
    const b = encodeSessionFrame({ kind: 'resume', sessionId: 'ab', lastEpoch: 0x01020304 });
    expect([...b]).toEqual([SessionFrameKind.Resume, 2, 0, 0, 2, 0x61, 0x62, 1, 2, 3, 4]);
  });

  it('hostile_bytes_fail_only_with_typed_protocol_errors', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.integer({ min: 16, max: 24 }), (b, k) => {
        const input = b.length >= 2 ? Uint8Array.from([k, SESSION_FRAME_VERSION, 0, 0, ...b]) : b;
        try {
          decodeSessionFrame(input);
        } catch (err) {
          expect(err).toBeInstanceOf(RpcDecodeError);
          expect((err as RpcDecodeError).code).toBe('ERR_RPC_PROTOCOL');
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('welcome_declaring_more_sequences_than_it_carries_is_refused_before_allocating', () => {
    const b = encodeSessionFrame({
      kind: 'welcome',
      sessionId: id,
      epoch: 2,
      token: undefined,
      floor: 0,
      done: [],
      running: [],
    });
    const v = new DataView(b.buffer);
    v.setUint32(b.length - 8, 0xffff_ffff); // doneCount
    expect(() => decodeSessionFrame(b)).toThrow(RpcDecodeError);
    v.setUint32(b.length - 8, 100);
    expect(() => decodeSessionFrame(b)).toThrow(/truncated/);
  });

  it('trailing_bytes_and_bad_ids_are_refused', () => {
    const ok = encodeSessionFrame({ kind: 'ping', nonce: 1 });
    expect(() => decodeSessionFrame(Uint8Array.from([...ok, 0]))).toThrow(/after the frame/);
    const bad = encodeSessionFrame({ kind: 'resume', sessionId: 'ab', lastEpoch: 1 });
    bad[5] = 0x2f; // '/'
    expect(() => decodeSessionFrame(bad)).toThrow(/session id/);
  });
});

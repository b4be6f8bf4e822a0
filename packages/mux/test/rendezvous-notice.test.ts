import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeRendezvousNotice,
  encodeRendezvousNotice,
  NoticeKind,
  RENDEZVOUS_NOTICE_BYTES,
  type RendezvousNotice,
} from '../src/internal/RendezvousNotice.js';
import { thrownCode as code } from './support/thrownCode.js';

const limits = { eagerThreshold: 8192, maxMessageBytes: 16 << 20 };

function encoded(n: RendezvousNotice): Uint8Array {
  const out = new Uint8Array(RENDEZVOUS_NOTICE_BYTES);
  encodeRendezvousNotice(out, 0, n);
  return out;
}

describe('rendezvous notice', () => {
  it('notice_round_trips_ready_and_done', () => {
    const ready = {
      kind: NoticeKind.Ready,
      token: 7,
      addr: 0x7f00_1234_0000n,
      length: 1 << 20,
      rkey: 42,
    };
    expect(decodeRendezvousNotice(encoded(ready), limits)).toEqual(ready);
    const done = { kind: NoticeKind.Done, token: 7, addr: 0n, length: 0, rkey: 0 };
    expect(decodeRendezvousNotice(encoded(done), limits)).toEqual(done);
  });

  it('notice_ready_outside_the_declared_limits_is_a_protocol_error_before_allocation', () => {
    const r = { kind: NoticeKind.Ready, token: 1, addr: 4096n, rkey: 3 };
    expect(code(() => decodeRendezvousNotice(encoded({ ...r, length: 8192 }), limits))).toBe(
      'ERR_MUX_PROTOCOL',
    );
    expect(
      code(() => decodeRendezvousNotice(encoded({ ...r, length: (16 << 20) + 1 }), limits)),
    ).toBe('ERR_MUX_PROTOCOL');
    const wrap = encoded({ ...r, length: 1 << 20 });
    new DataView(wrap.buffer).setBigUint64(8, (1n << 64n) - 100n);
    expect(code(() => decodeRendezvousNotice(wrap, limits))).toBe('ERR_MUX_PROTOCOL');
  });

  it('notice_with_bad_kind_reserved_bits_size_or_a_done_carrying_a_block_is_rejected', () => {
    const done = encoded({ kind: NoticeKind.Done, token: 1, addr: 0n, length: 0, rkey: 0 });
    const mutate = (at: number, value: number) => {
      const b = new Uint8Array(done);
      b[at] = value;
      return code(() => decodeRendezvousNotice(b, limits));
    };
    expect(mutate(0, 9)).toBe('ERR_MUX_PROTOCOL');
    expect(mutate(1, 1)).toBe('ERR_MUX_PROTOCOL');
    expect(mutate(23, 1)).toBe('ERR_MUX_PROTOCOL');
    expect(code(() => decodeRendezvousNotice(done.subarray(0, 23), limits))).toBe(
      'ERR_MUX_PROTOCOL',
    );
  });

  it('notice_decode_of_arbitrary_bytes_is_within_limits_or_a_protocol_error', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 24, maxLength: 24 }), (bytes) => {
        let n: RendezvousNotice;
        try {
          n = decodeRendezvousNotice(bytes, limits);
        } catch (e) {
          expect((e as { code?: string }).code).toBe('ERR_MUX_PROTOCOL');
          return;
        }
        if (n.kind === NoticeKind.Ready) {
          expect(n.length).toBeGreaterThan(limits.eagerThreshold);
          expect(n.length).toBeLessThanOrEqual(limits.maxMessageBytes);
        }
      }),
    );
  });
});

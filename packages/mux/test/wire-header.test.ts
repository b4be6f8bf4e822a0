import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeWireHeader,
  encodeWireHeader,
  newWireHeader,
  stampWireHeader,
  WIRE_FLAG_CREDIT_STALLED,
  WIRE_HEADER_BYTES,
  WireType,
} from '../src/internal/WireHeader.js';
import { thrownCode } from './support/thrownCode.js';

const EAGER = 8192;

function message(
  type: WireType,
  channel: number,
  seq: number,
  length: number,
  payload: number,
): Uint8Array {
  const b = new Uint8Array(WIRE_HEADER_BYTES + payload);
  encodeWireHeader(b, type, channel, seq, length);
  return b;
}

describe('rdma wire header', () => {
  it('round_trips_every_field_including_piggybacked_credits_and_window_returns', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 0xffffffff }),
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.integer({ min: 0, max: EAGER }),
        fc.integer({ min: 0, max: 0xffff }),
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.integer({ min: 0, max: 0xffffffff }),
        fc.constantFrom(0, WIRE_FLAG_CREDIT_STALLED),
        (channel, seq, length, credits, rm, rb, flags) => {
          const b = message(WireType.Data, channel, seq, length, length);
          stampWireHeader(b, credits, rm, rb, flags);
          const h = decodeWireHeader(b, b.length, EAGER, newWireHeader());
          expect(h).toEqual({
            type: WireType.Data,
            flags,
            channel,
            seq,
            length,
            credits,
            releasedMessages: rm,
            releasedBytes: rb,
          });
        },
      ),
    );
  });

  it('refuses_what_a_hostile_peer_can_send_with_ERR_MUX_PROTOCOL', () => {
    const h = newWireHeader();
    const bad: Array<[Uint8Array, number]> = [
      [new Uint8Array(10), 10], // shorter than a header
      [message(WireType.Data, 1, 0, 5, 4), WIRE_HEADER_BYTES + 4], // length ≠ payload
      [message(WireType.Data, 1, 0, EAGER + 1, EAGER + 1), WIRE_HEADER_BYTES + EAGER + 1], // over eager
      [message(WireType.Data, 0, 0, 0, 0), WIRE_HEADER_BYTES], // channel 0
      [message(WireType.Open, 1, 0, 256, 256), WIRE_HEADER_BYTES + 256], // name too long
      [message(WireType.Close, 1, 3, 0, 0), WIRE_HEADER_BYTES], // close with a sequence
      [message(WireType.Credit, 5, 0, 0, 0), WIRE_HEADER_BYTES], // credit on a channel
      [message(WireType.Ready, 1, 0, 99999, 10), WIRE_HEADER_BYTES + 10], // short notice
      [message(WireType.Done, 1, 0, 0, 24), WIRE_HEADER_BYTES + 24], // done on a channel
      [message(9 as WireType, 1, 0, 0, 0), WIRE_HEADER_BYTES], // unknown type
    ];
    for (const [b, len] of bad)
      expect(thrownCode(() => decodeWireHeader(b, len, EAGER, h))).toBe('ERR_MUX_PROTOCOL');
    const reserved = message(WireType.Close, 1, 0, 0, 0);
    reserved[1] = 2; // an unknown flag
    expect(thrownCode(() => decodeWireHeader(reserved, WIRE_HEADER_BYTES, EAGER, h))).toBe(
      'ERR_MUX_PROTOCOL',
    );
    // byteLen beyond the buffer (a completion that lies) is refused, not read past.
    const small = message(WireType.Close, 1, 0, 0, 0);
    expect(thrownCode(() => decodeWireHeader(small, 4096, EAGER, h))).toBe('ERR_MUX_PROTOCOL');
  });
});

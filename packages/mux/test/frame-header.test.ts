import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeFrameHeader,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameHeader,
  FrameType,
} from '../src/index.js';

const limits = {
  maxFrameBytes: 1 << 20,
  knownChannel: (id: number) => id === 7 || id === 0xffffffff,
};
const out = (): FrameHeader => ({ type: FrameType.Data, channel: 0, seq: 0, length: 0 });

function header(type: number, channel: number, seq: number, length: number): Uint8Array {
  const b = new Uint8Array(FRAME_HEADER_BYTES);
  encodeFrameHeader(b, 0, type as FrameType, channel, seq, length);
  return b;
}

describe('frame header', () => {
  it('encodes_the_documented_big_endian_layout', () => {
    expect([...header(FrameType.Data, 7, 0x01020304, 0x0a0b0c0d)]).toEqual([
      1, 0, 0, 0, 0, 0, 0, 7, 1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d,
    ]);
  });

  it('round_trips_every_valid_data_header', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(7, 0xffffffff),
        fc.nat({ max: 0xffffffff }),
        fc.nat({ max: 1 << 20 }),
        (ch, seq, len) => {
          const h = decodeFrameHeader(header(FrameType.Data, ch, seq, len), 0, limits, out());
          expect(h).toEqual({ type: FrameType.Data, channel: ch, seq, length: len });
        },
      ),
    );
  });

  it('rejects_oversized_unknown_and_malformed_headers_before_any_payload', () => {
    const bad = [
      header(FrameType.Data, 7, 0, (1 << 20) + 1), // too large
      header(FrameType.Data, 8, 0, 10), // unknown channel
      header(FrameType.Data, 0, 0, 10), // channel 0
      header(FrameType.Close, 9, 0, 0), // close of an unknown channel
      header(FrameType.Open, 0, 0, 3), // open of channel 0
      header(FrameType.Open, 9, 0, 256), // name too long
      header(FrameType.Credit, 0, 0, 4), // wrong credit payload
      header(FrameType.Ping, 1, 0, 8), // heartbeat on a channel
      header(FrameType.GoAway, 0, 0, 1),
      header(0, 7, 0, 0), // unknown type
      header(99, 7, 0, 0),
    ];
    const reserved = header(FrameType.Data, 7, 0, 1);
    reserved[2] = 1;
    bad.push(reserved);
    for (const b of bad) {
      expect(() => decodeFrameHeader(b, 0, limits, out())).toThrow(
        expect.objectContaining({ code: 'ERR_MUX_PROTOCOL' }),
      );
    }
    expect(() => decodeFrameHeader(new Uint8Array(15), 0, limits, out())).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_PROTOCOL' }),
    );
  });

  it('random_bytes_never_decode_to_an_out_of_limit_frame', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 16, maxLength: 16 }), (b) => {
        try {
          const h = decodeFrameHeader(b, 0, limits, out());
          expect(h.length).toBeLessThanOrEqual(limits.maxFrameBytes);
          if (h.type === FrameType.Data) expect(limits.knownChannel(h.channel)).toBe(true);
        } catch (err) {
          expect(err).toMatchObject({ code: 'ERR_MUX_PROTOCOL' });
        }
      }),
    );
  });
});

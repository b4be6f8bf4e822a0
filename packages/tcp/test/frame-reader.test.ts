import { encodeFrameHeader, FRAME_HEADER_BYTES, type FrameHeader, FrameType } from '@rdmajs/mux';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FrameReader, type FrameSink } from '../src/internal/FrameReader.js';

interface Got {
  channel: number;
  seq: number;
  payload: number[];
}

function sink(out: Got[], assembled: number[]): FrameSink {
  return {
    maxFrameBytes: 1 << 16,
    ended: false,
    knownChannel: () => true,
    header() {},
    payloadSpace: (n) => {
      assembled.push(n);
      return new Uint8Array(n);
    },
    frame(h: Readonly<FrameHeader>, payload: Uint8Array) {
      out.push({ channel: h.channel, seq: h.seq, payload: [...payload] });
    },
  };
}

function encode(frames: Got[]): Uint8Array {
  const total = frames.reduce((n, f) => n + FRAME_HEADER_BYTES + f.payload.length, 0);
  const wire = new Uint8Array(total);
  let off = 0;
  for (const f of frames) {
    encodeFrameHeader(wire, off, FrameType.Data, f.channel, f.seq, f.payload.length);
    wire.set(f.payload, off + FRAME_HEADER_BYTES);
    off += FRAME_HEADER_BYTES + f.payload.length;
  }
  return wire;
}

describe('FrameReader', () => {
  it('any_split_of_the_stream_into_chunks_yields_the_same_frames', () => {
    const frame = fc.record({
      channel: fc.integer({ min: 1, max: 0xffffffff }),
      seq: fc.nat(),
      payload: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 300 }),
    });
    fc.assert(
      fc.property(
        fc.array(frame, { maxLength: 20 }),
        fc.array(fc.nat(), { maxLength: 30 }),
        (frames, cuts) => {
          const wire = encode(frames);
          const points = [...new Set(cuts.map((c) => c % (wire.length + 1)))].sort((a, b) => a - b);
          const got: Got[] = [];
          const assembled: number[] = [];
          const reader = new FrameReader(sink(got, assembled));
          let prev = 0;
          for (const p of [...points, wire.length]) {
            reader.push(wire.subarray(prev, p));
            prev = p;
          }
          expect(got).toEqual(frames);
          expect(reader.partialBytes).toBe(0);
          // Every payload is asked memory for once, of exactly its length.
          expect(assembled).toEqual(frames.map((f) => f.payload.length));
        },
      ),
    );
  });

  it('a_header_is_refused_before_its_payload_is_asked_for', () => {
    const got: Got[] = [];
    const assembled: number[] = [];
    const reader = new FrameReader(sink(got, assembled));
    const h = new Uint8Array(FRAME_HEADER_BYTES);
    encodeFrameHeader(h, 0, FrameType.Data, 1, 0, (1 << 16) + 1);
    expect(() => reader.push(h)).toThrow(expect.objectContaining({ code: 'ERR_MUX_PROTOCOL' }));
    expect(assembled).toEqual([]);
  });

  it('data_payloads_are_copied_into_the_sinks_memory_never_views_of_the_chunk', () => {
    const views: Uint8Array[] = [];
    const spaces: Uint8Array[] = [];
    const reader = new FrameReader({
      ...sink([], []),
      payloadSpace: (n) => {
        const b = new Uint8Array(n);
        spaces.push(b);
        return b;
      },
      frame: (_h, p) => views.push(p),
    });
    const wire = encode([
      { channel: 1, seq: 0, payload: [1, 2, 3] },
      { channel: 1, seq: 1, payload: Array.from({ length: 1000 }, (_, i) => i & 0xff) },
    ]);
    reader.push(wire);
    wire.fill(0); // the socket's next read reuses the chunk
    const [small, big] = views as [Uint8Array, Uint8Array];
    expect(small).toBe(spaces[0]);
    expect(big).toBe(spaces[1]);
    expect([...small]).toEqual([1, 2, 3]);
    expect([...big]).toEqual(Array.from({ length: 1000 }, (_, i) => i & 0xff));
  });

  it('a_control_frame_that_spans_chunks_is_gathered_without_asking_for_memory', () => {
    const got: { type: FrameType; name: string }[] = [];
    const asked: number[] = [];
    const reader = new FrameReader({
      ...sink([], asked),
      frame: (h, p) => got.push({ type: h.type, name: Buffer.from(p).toString('utf8') }),
    });
    const name = Buffer.from('a-channel-name', 'utf8');
    const wire = new Uint8Array(FRAME_HEADER_BYTES + name.length);
    encodeFrameHeader(wire, 0, FrameType.Open, 2, 0, name.length);
    wire.set(name, FRAME_HEADER_BYTES);
    for (let i = 0; i < wire.length; i += 5) reader.push(wire.slice(i, i + 5));
    expect(got).toEqual([{ type: FrameType.Open, name: 'a-channel-name' }]);
    expect(asked).toEqual([]);
    expect(reader.partialBytes).toBe(0);
  });
});

import {
  CREDIT_PAYLOAD_BYTES,
  decodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameHeader,
  type FrameLimits,
  FrameType,
  MAX_CHANNEL_NAME_BYTES,
  PING_PAYLOAD_BYTES,
} from '@rdmajs/mux';

export interface FrameSink extends FrameLimits {
  /**
   * A header passed validation, before any of its payload is buffered: the place for checks
   * that need connection state (sequence, window). Throws to refuse the frame.
   */
  header(h: Readonly<FrameHeader>): void;
  /**
   * A whole frame. A Data frame's `payload` is the buffer `payloadSpace` gave for it; any
   * other frame's is a view of the chunk (or of the reader's scratch), valid only during
   * the call: the chunk is reused by the next read.
   */
  frame(h: Readonly<FrameHeader>, payload: Uint8Array): void;
  /** Memory a Data payload of `length` bytes is copied into (kept until the application releases it). */
  payloadSpace(length: number): Uint8Array;
  /**
   * True once the connection failed or closed, e.g. destroyed by a listener inside `frame`:
   * the rest of the chunk is then dropped, not parsed (no channel opens on a dead connection).
   */
  readonly ended: boolean;
}

/** The largest payload of a frame that is not Data (an Open's channel name). */
const MAX_CONTROL_PAYLOAD = Math.max(
  MAX_CHANNEL_NAME_BYTES,
  CREDIT_PAYLOAD_BYTES,
  PING_PAYLOAD_BYTES,
);

/**
 * Splits a TCP byte stream into frames without concatenating the stream. The chunks it is
 * fed are reused by the next socket read, so nothing keeps a view of them: a Data payload
 * is copied once, into the memory the sink gives for it after its header was validated;
 * the other frames (small, bounded) are read during `frame()` and never kept.
 */
export class FrameReader {
  readonly #sink: FrameSink;
  readonly #header = new Uint8Array(FRAME_HEADER_BYTES);
  #headerFill = 0;
  readonly #h: FrameHeader = { type: FrameType.Data, channel: 0, seq: 0, length: 0 };
  /** The frame whose header is read and whose payload is incomplete. */
  #inFrame = false;
  #payload: Uint8Array | undefined;
  #payloadFill = 0;
  /** A control frame's payload that spans chunks. */
  readonly #control = new Uint8Array(MAX_CONTROL_PAYLOAD);

  constructor(sink: FrameSink) {
    this.#sink = sink;
  }

  /** Bytes of a partial frame held (header and payload). */
  get partialBytes(): number {
    return this.#headerFill + (this.#payload === undefined ? 0 : this.#payloadFill);
  }

  /** Feeds one chunk; throws (MuxProtocolError or the sink's error) on bad input. */
  push(chunk: Uint8Array): void {
    let off = 0;
    const n = chunk.length;
    while (off < n) {
      if (this.#sink.ended) return;
      if (!this.#inFrame) {
        if (this.#headerFill === 0 && n - off >= FRAME_HEADER_BYTES) {
          decodeFrameHeader(chunk, off, this.#sink, this.#h);
          off += FRAME_HEADER_BYTES;
        } else {
          const take = Math.min(FRAME_HEADER_BYTES - this.#headerFill, n - off);
          this.#header.set(chunk.subarray(off, off + take), this.#headerFill);
          this.#headerFill += take;
          off += take;
          if (this.#headerFill < FRAME_HEADER_BYTES) return;
          this.#headerFill = 0;
          decodeFrameHeader(this.#header, 0, this.#sink, this.#h);
        }
        this.#sink.header(this.#h);
        const len = this.#h.length;
        if (this.#h.type !== FrameType.Data && n - off >= len) {
          this.#sink.frame(this.#h, chunk.subarray(off, off + len));
          off += len;
          continue;
        }
        this.#inFrame = true;
        this.#payload =
          this.#h.type === FrameType.Data
            ? this.#sink.payloadSpace(len)
            : this.#control.subarray(0, len);
        this.#payloadFill = 0;
      }
      const payload = this.#payload as Uint8Array;
      const take = Math.min(payload.length - this.#payloadFill, n - off);
      payload.set(chunk.subarray(off, off + take), this.#payloadFill);
      this.#payloadFill += take;
      off += take;
      if (this.#payloadFill === payload.length) {
        this.#inFrame = false;
        this.#payload = undefined;
        this.#payloadFill = 0;
        this.#sink.frame(this.#h, payload);
      }
    }
  }

  /** Drops a partial frame (the connection is going away); returns its buffer, if any. */
  reset(): Uint8Array | undefined {
    const p = this.#payload;
    this.#payload = undefined;
    this.#inFrame = false;
    this.#headerFill = 0;
    this.#payloadFill = 0;
    return p;
  }
}

import {
  decodeFrameHeader,
  FRAME_HEADER_BYTES,
  type FrameHeader,
  type FrameLimits,
  FrameType,
} from '@rdmajs/mux';

export interface FrameSink extends FrameLimits {
  /**
   * A header passed validation, before any of its payload is buffered: the place for checks
   * that need connection state (sequence, window). Throws to refuse the frame.
   */
  header(h: Readonly<FrameHeader>): void;
  /**
   * A whole frame. `payload` is a view of the socket's chunk when the frame lay inside one
   * and fills at least half of it (no copy), a copy when it is a smaller part of its chunk,
   * else the buffer it was assembled in (`assembled` true). Valid as long as the receiver
   * keeps it.
   */
  frame(h: Readonly<FrameHeader>, payload: Uint8Array, assembled: boolean): void;
  /** Memory for a payload that spans chunks (a registered block, or heap by default). */
  assemble(length: number): Uint8Array;
}

/**
 * Splits a TCP byte stream into frames without concatenating the stream: complete frames are
 * views of the chunk they arrived in; only a frame that spans chunks is assembled, into a
 * buffer of exactly its length, allocated after its header was validated.
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
        this.#inFrame = true;
        const len = this.#h.length;
        if (n - off >= len) {
          // The whole payload is in this chunk: hand out a view of it, unless it is a small
          // part of a big chunk: a held view pins the whole chunk, so memory held could
          // exceed the receive window many times over. Copying those keeps what is pinned
          // within twice what is accounted.
          this.#inFrame = false;
          const view = chunk.subarray(off, off + len);
          off += len;
          const payload =
            len * 2 < chunk.buffer.byteLength ? Uint8Array.prototype.slice.call(view) : view;
          this.#sink.frame(this.#h, payload, false);
          continue;
        }
        this.#payload = this.#sink.assemble(len);
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
        this.#sink.frame(this.#h, payload, true);
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

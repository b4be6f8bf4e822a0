import { MuxProtocolError } from './errors.js';

/**
 * The frame header every transport puts before a frame (16 bytes, big-endian):
 *
 * ```
 * 0 type u8 | 1 flags u8 (0) | 2 reserved u16 (0) | 4 channel u32 | 8 seq u32 | 12 length u32
 * ```
 * `length` bytes of payload follow. Data frames carry one message of one channel, numbered
 * per channel from 0; the other types are control frames with fixed payloads.
 */
export const FRAME_HEADER_BYTES = 16;

export const FrameType = {
  /** One message on `channel`, sequence `seq`. */
  Data: 1,
  /** The sender opens `channel`; payload: its name (UTF-8, ≤ 255 bytes). */
  Open: 2,
  /** The sender will send no more on `channel` (after its data frames before this one). */
  Close: 3,
  /** Window update, channel 0; payload: u32 messages, u32 bytes released by the receiver. */
  Credit: 4,
  /** Heartbeat, channel 0; payload 8 bytes echoed by Pong. */
  Ping: 5,
  Pong: 6,
  /** Graceful end of the connection, channel 0: the sender sends nothing after it. */
  GoAway: 7,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

export const MAX_CHANNEL_NAME_BYTES = 255;
export const CREDIT_PAYLOAD_BYTES = 8;
export const PING_PAYLOAD_BYTES = 8;

export interface FrameHeader {
  type: FrameType;
  channel: number;
  seq: number;
  length: number;
}

/** What the receiver accepts; checked before a byte of payload is buffered. */
export interface FrameLimits {
  /** Largest Data payload this side announced. */
  readonly maxFrameBytes: number;
  /** True for channels open for receiving (Data and Close must name one). */
  knownChannel(id: number): boolean;
}

/** Writes a header at `offset` of `out` (16 bytes). */
export function encodeFrameHeader(
  out: Uint8Array,
  offset: number,
  type: FrameType,
  channel: number,
  seq: number,
  length: number,
): void {
  out[offset] = type;
  out[offset + 1] = 0;
  out[offset + 2] = 0;
  out[offset + 3] = 0;
  writeU32(out, offset + 4, channel);
  writeU32(out, offset + 8, seq);
  writeU32(out, offset + 12, length);
}

/**
 * Decodes and validates the header at `offset` into `out` (reused: no allocation per frame).
 * Throws ERR_MUX_PROTOCOL for an unknown type, reserved bits set, a payload longer than the
 * limit or than its type allows, or a channel that is not open. Checks that need the
 * connection's state beyond `knownChannel` (sequence numbers, window, who may open which
 * id) are the connection's.
 */
export function decodeFrameHeader(
  bytes: Uint8Array,
  offset: number,
  limits: FrameLimits,
  out: FrameHeader,
): FrameHeader {
  if (offset < 0 || offset + FRAME_HEADER_BYTES > bytes.length) {
    throw new MuxProtocolError('frame header: short buffer');
  }
  const type = bytes[offset] as number;
  if (
    (bytes[offset + 1] as number) !== 0 ||
    (bytes[offset + 2] as number) !== 0 ||
    (bytes[offset + 3] as number) !== 0
  ) {
    throw new MuxProtocolError('frame header: reserved bits set');
  }
  const channel = readU32(bytes, offset + 4);
  const seq = readU32(bytes, offset + 8);
  const length = readU32(bytes, offset + 12);
  switch (type) {
    case FrameType.Data:
      if (length > limits.maxFrameBytes) {
        throw new MuxProtocolError(
          `frame header: ${length} bytes of data, limit ${limits.maxFrameBytes}`,
        );
      }
      if (channel === 0 || !limits.knownChannel(channel)) {
        throw new MuxProtocolError(`frame header: data for unknown channel ${channel}`);
      }
      break;
    case FrameType.Open:
      if (channel === 0 || length > MAX_CHANNEL_NAME_BYTES || seq !== 0) {
        throw new MuxProtocolError(
          `frame header: bad open of channel ${channel} (${length} bytes)`,
        );
      }
      break;
    case FrameType.Close:
      if (channel === 0 || length !== 0 || !limits.knownChannel(channel)) {
        throw new MuxProtocolError(`frame header: bad close of channel ${channel}`);
      }
      break;
    case FrameType.Credit:
      if (channel !== 0 || seq !== 0 || length !== CREDIT_PAYLOAD_BYTES) {
        throw new MuxProtocolError('frame header: bad credit frame');
      }
      break;
    case FrameType.Ping:
    case FrameType.Pong:
      if (channel !== 0 || seq !== 0 || length !== PING_PAYLOAD_BYTES) {
        throw new MuxProtocolError('frame header: bad heartbeat frame');
      }
      break;
    case FrameType.GoAway:
      if (channel !== 0 || seq !== 0 || length !== 0)
        throw new MuxProtocolError('frame header: bad goaway frame');
      break;
    default:
      throw new MuxProtocolError(`frame header: unknown type ${type}`);
  }
  out.type = type as FrameType;
  out.channel = channel;
  out.seq = seq;
  out.length = length;
  return out;
}

export function writeU32(out: Uint8Array, offset: number, v: number): void {
  out[offset] = v >>> 24;
  out[offset + 1] = (v >>> 16) & 0xff;
  out[offset + 2] = (v >>> 8) & 0xff;
  out[offset + 3] = v & 0xff;
}

export function readU32(b: Uint8Array, offset: number): number {
  return (
    (((b[offset] as number) << 24) >>> 0) +
    ((b[offset + 1] as number) << 16) +
    ((b[offset + 2] as number) << 8) +
    (b[offset + 3] as number)
  );
}

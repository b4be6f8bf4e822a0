import { MuxProtocolError } from '../errors.js';
import { readU32, writeU32 } from '../FrameHeader.js';

/**
 * The header at the start of every RDMA SEND between two RdmaConnections (24 bytes,
 * big-endian). The first 16 bytes have FrameHeader's layout, with byte 2–3 carrying
 * piggybacked receive credits (buffers reposted for the peer); bytes 16–23 return receive
 * window space (messages and bytes the application released since the last return), as
 * the TCP transport's Credit frame does:
 *
 * ```
 * 0 type u8 | 1 flags u8 | 2 credits u16 | 4 channel u32 | 8 seq u32 | 12 length u32
 * 16 releasedMessages u32 | 20 releasedBytes u32
 * ```
 * Flags (protocol 3): `CREDIT_STALLED` says the sender waited for a receive credit since its
 * last message: the receiver's signal to grow its lease. Other bits must be 0.
 * Data carries `length` payload bytes after the header (eager); Ready and Done carry a
 * 24-byte RendezvousNotice (`length` is the message's length for Ready); Open carries the
 * channel's name; Close and Credit carry nothing.
 */
export const WIRE_HEADER_BYTES = 24;

export const WireType = {
  Data: 1,
  Open: 2,
  Close: 3,
  Credit: 4,
  Ready: 5,
  Done: 6,
} as const;
export type WireType = (typeof WireType)[keyof typeof WireType];

/** Header flag: the sender waited for a credit since its last message (see the layout). */
export const WIRE_FLAG_CREDIT_STALLED = 0x01;

export interface WireHeader {
  type: WireType;
  flags: number;
  credits: number;
  channel: number;
  seq: number;
  length: number;
  releasedMessages: number;
  releasedBytes: number;
}

export function newWireHeader(): WireHeader {
  return {
    type: WireType.Credit,
    flags: 0,
    credits: 0,
    channel: 0,
    seq: 0,
    length: 0,
    releasedMessages: 0,
    releasedBytes: 0,
  };
}

/** Writes the fields that are known when a message is queued. */
export function encodeWireHeader(
  out: Uint8Array,
  type: WireType,
  channel: number,
  seq: number,
  length: number,
): void {
  out[0] = type;
  out[1] = 0;
  out[2] = 0;
  out[3] = 0;
  writeU32(out, 4, channel);
  writeU32(out, 8, seq);
  writeU32(out, 12, length);
  writeU32(out, 16, 0);
  writeU32(out, 20, 0);
}

/** Fills in what is only known when the message is posted: credits, window returns, flags. */
export function stampWireHeader(
  out: Uint8Array,
  credits: number,
  releasedMessages: number,
  releasedBytes: number,
  flags = 0,
): void {
  out[1] = flags;
  out[2] = (credits >>> 8) & 0xff;
  out[3] = credits & 0xff;
  writeU32(out, 16, releasedMessages);
  writeU32(out, 20, releasedBytes);
}

/**
 * Decodes a received buffer of `byteLen` bytes (an untrusted peer's): type, flags,
 * and the payload size each type allows. State checks (channel, sequence, window) are the
 * connection's. Throws ERR_MUX_PROTOCOL.
 */
export function decodeWireHeader(
  bytes: Uint8Array,
  byteLen: number,
  maxEager: number,
  out: WireHeader,
): WireHeader {
  if (byteLen < WIRE_HEADER_BYTES || byteLen > bytes.length) {
    throw new MuxProtocolError(`rdma message of ${byteLen} bytes: shorter than its header`);
  }
  const type = bytes[0] as number;
  const flags = bytes[1] as number;
  if ((flags & ~WIRE_FLAG_CREDIT_STALLED) !== 0)
    throw new MuxProtocolError('rdma header: unknown flag set');
  const payload = byteLen - WIRE_HEADER_BYTES;
  const channel = readU32(bytes, 4);
  const seq = readU32(bytes, 8);
  const length = readU32(bytes, 12);
  switch (type) {
    case WireType.Data:
      if (length !== payload || length > maxEager || channel === 0)
        throw new MuxProtocolError(`rdma header: bad data (${length} of ${payload} bytes)`);
      break;
    case WireType.Open:
      if (length !== payload || length > 255 || channel === 0 || seq !== 0)
        throw new MuxProtocolError('rdma header: bad open');
      break;
    case WireType.Close:
      if (payload !== 0 || length !== 0 || channel === 0 || seq !== 0)
        throw new MuxProtocolError('rdma header: bad close');
      break;
    case WireType.Credit:
      if (payload !== 0 || length !== 0 || channel !== 0 || seq !== 0)
        throw new MuxProtocolError('rdma header: bad credit');
      break;
    case WireType.Ready:
      if (payload !== 24 || channel === 0) throw new MuxProtocolError('rdma header: bad ready');
      break;
    case WireType.Done:
      if (payload !== 24 || channel !== 0 || seq !== 0 || length !== 0)
        throw new MuxProtocolError('rdma header: bad done');
      break;
    default:
      throw new MuxProtocolError(`rdma header: unknown type ${type}`);
  }
  out.type = type as WireType;
  out.flags = flags;
  out.credits = ((bytes[2] as number) << 8) | (bytes[3] as number);
  out.channel = channel;
  out.seq = seq;
  out.length = length;
  out.releasedMessages = readU32(bytes, 16);
  out.releasedBytes = readU32(bytes, 20);
  return out;
}

import { Block, BlockSlice } from '@rdmajs/allocator';
import { MuxError } from './errors.js';

/**
 * One piece of an outbound message: an allocator block, a zero-copy slice of one, or plain
 * bytes. A message is one part or an array of parts, sent as one message (gathered, not
 * copied, where the transport can).
 */
export type MessagePart = Block | BlockSlice | Uint8Array;
export type OutboundMessage = MessagePart | readonly MessagePart[];

/** The bytes of a part (a view, never a copy). Throws ERR_MUX_INVALID_ARG for anything else. */
export function partBytes(part: MessagePart): Uint8Array {
  if (part instanceof Uint8Array) return part;
  if (part instanceof Block || part instanceof BlockSlice) return part.bytes;
  throw new MuxError(
    'ERR_MUX_INVALID_ARG',
    `a message part must be a Block, a BlockSlice or a Uint8Array, got ${describe(part)}`,
  );
}

/**
 * The parts of a message as byte views, validated; `out` is reused by callers on the hot path.
 */
export function messageViews(msg: OutboundMessage, out: Uint8Array[] = []): Uint8Array[] {
  out.length = 0;
  if (Array.isArray(msg)) {
    for (const p of msg as readonly MessagePart[]) out.push(partBytes(p));
  } else {
    out.push(partBytes(msg as MessagePart));
  }
  return out;
}

/** Total bytes of a message, every part validated (no array built: the send path's check). */
export function messageLength(msg: OutboundMessage): number {
  if (!Array.isArray(msg)) return partBytes(msg as MessagePart).length;
  let n = 0;
  for (const p of msg as readonly MessagePart[]) n += partBytes(p).length;
  return n;
}

/** Copies a message's parts into `dst` from `offset` (the one copy of non-registered bytes). */
export function copyMessage(msg: OutboundMessage, dst: Uint8Array, offset: number): void {
  if (!Array.isArray(msg)) {
    dst.set(partBytes(msg as MessagePart), offset);
    return;
  }
  let off = offset;
  for (const p of msg as readonly MessagePart[]) {
    const b = partBytes(p);
    dst.set(b, off);
    off += b.length;
  }
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return (x as object).constructor?.name ?? 'object';
  return typeof x;
}

const released = (): never => {
  throw new MuxError('ERR_MUX_RELEASED', 'inbound message used after release()');
};

/** Re-arms a released message for a later arrival (transports that pool them; see below). */
export let rearmInbound: (
  m: InboundMessage,
  channel: number,
  seq: number,
  bytes: Uint8Array,
  block: Block | undefined,
) => void;

/**
 * A received message: a view of the transport's receive memory (zero-copy where the
 * transport can: a registered buffer on RDMA, the socket's own chunk on TCP) that the
 * receiver gives back with `release()`. Until then it counts against the connection's
 * receive window, so a receiver that holds messages slows its sender down (backpressure).
 * `copy()` copies the bytes out; `using m = await ch.receive()` releases at scope end.
 *
 * After `release()` the object belongs to the transport again: RdmaTransport reuses it for a
 * later message in the same receive buffer (no allocation per message), so do not keep it.
 */
export class InboundMessage {
  #channel: number;
  #seq: number;
  #length: number;
  #bytes: Uint8Array | undefined;
  #block: Block | undefined;
  readonly #onRelease: (m: InboundMessage) => void;
  #live = true;

  static {
    rearmInbound = (m, channel, seq, bytes, block) => {
      m.#channel = channel;
      m.#seq = seq;
      m.#length = bytes.length;
      m.#bytes = bytes;
      m.#block = block;
      m.#live = true;
    };
  }

  /** For transports: `onRelease` runs once per arrival, at the first `release()`. */
  constructor(
    channel: number,
    seq: number,
    bytes: Uint8Array,
    onRelease: (m: InboundMessage) => void,
    block?: Block,
  ) {
    this.#channel = channel;
    this.#seq = seq;
    this.#length = bytes.length;
    this.#bytes = bytes;
    this.#onRelease = onRelease;
    this.#block = block;
  }

  /** Channel id the message arrived on. */
  get channel(): number {
    return this.#channel;
  }

  /** Per-channel sequence number, from 0. */
  get seq(): number {
    return this.#seq;
  }

  get length(): number {
    return this.#length;
  }

  /** The message's bytes (a view; valid until `release()`). */
  get bytes(): Uint8Array {
    return this.#bytes ?? released();
  }

  /** The allocator block holding the message, when the transport received into one. */
  get block(): Block | undefined {
    if (this.#bytes === undefined) released();
    return this.#block;
  }

  get released(): boolean {
    return this.#bytes === undefined;
  }

  /** A private copy of the bytes; the message stays held until `release()`. */
  copy(): Uint8Array {
    return Uint8Array.prototype.slice.call(this.bytes);
  }

  /** Gives the memory back to the transport. Idempotent. */
  release(): void {
    if (!this.#live) return;
    this.#live = false;
    this.#bytes = undefined;
    this.#block = undefined;
    this.#onRelease(this);
  }

  [Symbol.dispose](): void {
    this.release();
  }
}

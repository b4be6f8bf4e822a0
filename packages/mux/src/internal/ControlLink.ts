import type { Socket } from 'node:net';
import { MuxProtocolError } from '../errors.js';
import type { SessionKeys } from '../Handshake.js';
import {
  CONTROL_HEADER_BYTES,
  CONTROL_TAG_BYTES,
  ControlOpener,
  ControlSealer,
} from './ControlSeal.js';
import { MAX_SETUP_BYTES } from './RdmaSetup.js';

/**
 * Messages on the control connection after the handshake:
 * `u32 length | u8 type | payload sealed with AES-256-GCM | 16-byte tag`, under the session
 * keys of the handshake (the header is authenticated too).
 * Setup carries the RdmaSetup; Ready says this side's QPs are connected (the peer may post
 * to them); Ping is liveness; GoAway ends the connection gracefully (sent after every RDMA
 * message of this side completed); LeaseReturn (u32 count, big-endian) gives receive credits
 * of a grown lease back (an idle sender): out of band, so it needs no credit of its own.
 */
export const ControlType = { Setup: 1, Ready: 2, Ping: 3, GoAway: 4, LeaseReturn: 5 } as const;
/** Payload bytes of a LeaseReturn. */
export const LEASE_RETURN_BYTES = 4;
export type ControlType = (typeof ControlType)[keyof typeof ControlType];
const PREFIX = CONTROL_HEADER_BYTES;

export interface ControlHandlers {
  message(type: ControlType, payload: Uint8Array): void;
  /** The socket closed or failed; `graceful` when it ended after the peer's end(). */
  closed(cause: Error | undefined): void;
  /**
   * The peer ended its side (sockets are half-open: 'close' waits for ours). A graceful close
   * ends after a GoAway; any other end is a peer going away.
   */
  ended?(): void;
}

/**
 * The control TCP connection of one RDMA peer. Lengths are checked against the type before
 * anything is buffered: Setup has a payload of at most MAX_SETUP_BYTES, LeaseReturn exactly
 * LEASE_RETURN_BYTES, the others none. Every message
 * is authenticated before it is delivered: the setup it carries names memory keys and QPs,
 * so a relay that altered it, or injected one, would steer our RDMA traffic.
 */
export class ControlLink {
  readonly socket: Socket;
  readonly remoteAddress: string;
  /** Last socket read / write (performance.now(): monotonic, so a wall-clock step fails no peer). */
  lastRead = performance.now();
  lastWrite = performance.now();
  #handlers: ControlHandlers | undefined;
  #buf = Buffer.alloc(PREFIX + MAX_SETUP_BYTES + CONTROL_TAG_BYTES);
  #fill = 0;
  #closed = false;
  #backlog: Array<[ControlType, Uint8Array]> = [];
  #closeCause: { cause: Error | undefined } | undefined;
  #ended = false;

  readonly #sealer: ControlSealer;
  readonly #opener: ControlOpener;

  /** `keys`: the handshake's session keys (Handshake.sessionKeys). */
  constructor(socket: Socket, leftover: Uint8Array, keys: SessionKeys) {
    this.socket = socket;
    this.#sealer = new ControlSealer(keys.send);
    this.#opener = new ControlOpener(keys.receive);
    this.remoteAddress = `${socket.remoteAddress}:${socket.remotePort}`;
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', (err) => this.#onClose(err));
    socket.on('close', () => this.#onClose(undefined));
    socket.on('end', () => {
      this.#ended = true;
      this.#handlers?.ended?.();
    });
    if (leftover.length > 0) this.#onData(leftover);
    socket.resume();
  }

  /** Who gets the messages; what arrived before is handed over first. */
  setHandlers(h: ControlHandlers): void {
    this.#handlers = h;
    for (const [t, p] of this.#backlog.splice(0)) h.message(t, p);
    if (this.#ended) h.ended?.();
    if (this.#closeCause !== undefined) h.closed(this.#closeCause.cause);
  }

  send(type: ControlType, payload?: Uint8Array): void {
    if (this.#closed || this.socket.destroyed) return;
    this.lastWrite = performance.now();
    this.socket.write(this.#sealer.seal(type, payload));
  }

  end(): void {
    if (!this.socket.destroyed) this.socket.end();
  }

  destroy(): void {
    this.#closed = true;
    this.socket.destroy();
  }

  #onData(chunk: Uint8Array): void {
    this.lastRead = performance.now();
    if (this.#closed) return;
    let off = 0;
    try {
      while (off < chunk.length) {
        const need =
          this.#fill < PREFIX ? PREFIX : PREFIX + this.#buf.readUInt32BE(0) + CONTROL_TAG_BYTES;
        const take = Math.min(need - this.#fill, chunk.length - off);
        this.#buf.set(chunk.subarray(off, off + take), this.#fill);
        this.#fill += take;
        off += take;
        if (this.#fill === PREFIX) {
          const len = this.#buf.readUInt32BE(0);
          const type = this.#buf.readUInt8(4);
          if (type < ControlType.Setup || type > ControlType.LeaseReturn)
            throw new MuxProtocolError(`control: unknown message type ${type}`);
          if (
            type === ControlType.Setup
              ? len > MAX_SETUP_BYTES || len === 0
              : len !== (type === ControlType.LeaseReturn ? LEASE_RETURN_BYTES : 0)
          )
            throw new MuxProtocolError(`control: type ${type} with ${len} bytes`);
        }
        const end = PREFIX + this.#buf.readUInt32BE(0);
        if (this.#fill >= PREFIX && this.#fill === end + CONTROL_TAG_BYTES) {
          const type = this.#buf.readUInt8(4) as ControlType;
          const payload = this.#opener.open(
            this.#buf.subarray(0, PREFIX),
            this.#buf.subarray(PREFIX, end),
            this.#buf.subarray(end, this.#fill),
          );
          this.#fill = 0;
          if (this.#handlers === undefined) this.#backlog.push([type, payload]);
          else this.#handlers.message(type, payload);
          if (this.#closed) return;
        }
      }
    } catch (err) {
      this.#closed = true;
      this.socket.destroy();
      this.#deliverClose(err as Error);
    }
  }

  #onClose(err: Error | undefined): void {
    if (this.#closeCause !== undefined) return;
    this.#deliverClose(err);
  }

  #deliverClose(cause: Error | undefined): void {
    if (this.#closeCause !== undefined) return;
    this.#closeCause = { cause };
    this.#handlers?.closed(cause);
  }
}

import type { Socket } from 'node:net';
import {
  MuxAbortError,
  MuxConnectionError,
  MuxDeadlineError,
  MuxError,
  MuxHandshakeError,
  MuxProtocolError,
} from '../errors.js';
import { HANDSHAKE_MESSAGE_BYTES, type Handshake } from '../Handshake.js';
import { MAX_SETUP_BYTES } from './RdmaSetup.js';

/**
 * Messages on the control connection after the handshake: `u32 length | u8 type | payload`.
 * Setup carries the RdmaSetup; Ready says this side's QPs are connected (the peer may post
 * to them); Ping is liveness; GoAway ends the connection gracefully (sent after every RDMA
 * message of this side completed).
 */
export const ControlType = { Setup: 1, Ready: 2, Ping: 3, GoAway: 4 } as const;
export type ControlType = (typeof ControlType)[keyof typeof ControlType];
const PREFIX = 5;

export interface ControlHandlers {
  message(type: ControlType, payload: Uint8Array): void;
  /** The socket closed or failed; `graceful` when it ended after the peer's end(). */
  closed(cause: Error | undefined): void;
}

/**
 * The control TCP connection of one RDMA peer. Lengths are checked against the type before
 * anything is buffered, and only Setup has a payload (at most MAX_SETUP_BYTES).
 */
export class ControlLink {
  readonly socket: Socket;
  readonly remoteAddress: string;
  lastRead = Date.now();
  lastWrite = Date.now();
  #handlers: ControlHandlers | undefined;
  #buf = Buffer.alloc(PREFIX + MAX_SETUP_BYTES);
  #fill = 0;
  #closed = false;
  #backlog: Array<[ControlType, Uint8Array]> = [];
  #closeCause: { cause: Error | undefined } | undefined;

  constructor(socket: Socket, leftover: Uint8Array) {
    this.socket = socket;
    this.remoteAddress = `${socket.remoteAddress}:${socket.remotePort}`;
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', (err) => this.#onClose(err));
    socket.on('close', () => this.#onClose(undefined));
    if (leftover.length > 0) this.#onData(leftover);
    socket.resume();
  }

  /** Who gets the messages; what arrived before is handed over first. */
  setHandlers(h: ControlHandlers): void {
    this.#handlers = h;
    for (const [t, p] of this.#backlog.splice(0)) h.message(t, p);
    if (this.#closeCause !== undefined) h.closed(this.#closeCause.cause);
  }

  send(type: ControlType, payload?: Uint8Array): void {
    if (this.#closed || this.socket.destroyed) return;
    const head = Buffer.allocUnsafe(PREFIX);
    head.writeUInt32BE(payload?.length ?? 0, 0);
    head.writeUInt8(type, 4);
    this.lastWrite = Date.now();
    this.socket.cork();
    this.socket.write(head);
    if (payload !== undefined && payload.length > 0) this.socket.write(payload);
    this.socket.uncork();
  }

  end(): void {
    if (!this.socket.destroyed) this.socket.end();
  }

  destroy(): void {
    this.#closed = true;
    this.socket.destroy();
  }

  #onData(chunk: Uint8Array): void {
    this.lastRead = Date.now();
    if (this.#closed) return;
    let off = 0;
    try {
      while (off < chunk.length) {
        const need = this.#fill < PREFIX ? PREFIX : PREFIX + this.#buf.readUInt32BE(0);
        const take = Math.min(need - this.#fill, chunk.length - off);
        this.#buf.set(chunk.subarray(off, off + take), this.#fill);
        this.#fill += take;
        off += take;
        if (this.#fill === PREFIX) {
          const len = this.#buf.readUInt32BE(0);
          const type = this.#buf.readUInt8(4);
          if (type < ControlType.Setup || type > ControlType.GoAway)
            throw new MuxProtocolError(`control: unknown message type ${type}`);
          if (type === ControlType.Setup ? len > MAX_SETUP_BYTES || len === 0 : len !== 0)
            throw new MuxProtocolError(`control: type ${type} with ${len} bytes`);
        }
        if (this.#fill >= PREFIX && this.#fill === PREFIX + this.#buf.readUInt32BE(0)) {
          const type = this.#buf.readUInt8(4) as ControlType;
          const payload = Uint8Array.prototype.slice.call(this.#buf.subarray(PREFIX, this.#fill));
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

/**
 * Runs the Handshake over the control socket: fixed-size messages only (nothing else is
 * buffered before the peer is authenticated). Resolves with the bytes that followed the last
 * handshake message. On failure the rejection goes out, the socket is destroyed and the
 * promise rejects with a typed error.
 */
export function controlHandshake(
  socket: Socket,
  hs: Handshake,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<Uint8Array> {
  return new Promise<Uint8Array>((resolve, reject) => {
    const buf = Buffer.alloc(HANDSHAKE_MESSAGE_BYTES);
    let fill = 0;
    let settled = false;
    const cleanup = () => {
      settled = true;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.off('end', onClose);
      socket.off('error', onError);
      signal?.removeEventListener('abort', onAbort);
    };
    const fail = (err: Error) => {
      if (settled) return;
      cleanup();
      const r = hs.rejection;
      if (r !== undefined && !socket.destroyed) socket.end(r);
      setTimeout(() => socket.destroy(), 100).unref();
      if (r === undefined) socket.destroy();
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      let off = 0;
      try {
        while (off < chunk.length && !settled) {
          const take = Math.min(HANDSHAKE_MESSAGE_BYTES - fill, chunk.length - off);
          chunk.copy(buf, fill, off, off + take);
          fill += take;
          off += take;
          if (fill < HANDSHAKE_MESSAGE_BYTES) return;
          fill = 0;
          const reply = hs.receive(buf);
          if (reply !== undefined) socket.write(reply);
          if (hs.state === 'done') {
            cleanup();
            socket.pause();
            resolve(Uint8Array.prototype.slice.call(chunk.subarray(off)));
            return;
          }
        }
      } catch (err) {
        fail(
          err instanceof MuxError ? err : new MuxHandshakeError('ERR_MUX_HANDSHAKE', String(err)),
        );
      }
    };
    const onClose = () =>
      fail(
        new MuxConnectionError(
          'ERR_MUX_CONNECTION_LOST',
          `handshake (${hs.role}): the peer closed the connection (state ${hs.state})`,
        ),
      );
    // A typed error is ours (a listener dropping or timing out the socket): kept as is.
    const onError = (err: Error) =>
      fail(
        err instanceof MuxError
          ? err
          : new MuxConnectionError(
              'ERR_MUX_CONNECTION_LOST',
              `handshake (${hs.role}): ${err.message}`,
              err,
            ),
      );
    const onAbort = () => fail(new MuxAbortError(`handshake (${hs.role})`, signal?.reason));
    const timer = setTimeout(
      () => fail(new MuxDeadlineError(`handshake (${hs.role})`, timeoutMs)),
      timeoutMs,
    );
    socket.on('data', onData);
    socket.on('close', onClose);
    // allowHalfOpen sockets emit no 'close' on the peer's FIN: a peer that ended (or a
    // server that dropped us at once) must not look like a deadline.
    socket.on('end', onClose);
    socket.on('error', onError);
    if (signal !== undefined) {
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
    }
    if (hs.role === 'client') socket.write(hs.start());
  });
}

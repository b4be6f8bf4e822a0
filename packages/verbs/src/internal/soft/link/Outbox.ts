// Answers for one connection (and, on an initiator's connection, its small requests beside
// them), gathered into a buffer and written with one system call per flush. Buffers are
// reused once the socket is done with them (its write callbacks come in order), so steady
// state allocates nothing; a buffer grown for a large READ answer is dropped after use
// instead of kept. When nothing of the connection is queued in node's stream, a flush is one
// non-blocking send of our own (SendNow): node's write would make a request object and run
// its stream machinery for the same syscall (a ping-pong pays it on every round trip); only
// what the kernel does not take goes through the stream, behind it.
import type { Socket } from 'node:net';
import { copyBytes } from './frames.js';
import { Ring } from './Ring.js';
import { socketFd } from './socketFd.js';

const SMALL = 16 << 10;
const EMPTY = Buffer.alloc(0);
/** Answers in a large buffer up to this many bytes are moved out rather than flushed with it. */
const MOVE_BYTES = 4 << 10;
/** The largest buffer kept for READ answers once written. */
const BIG_KEEP = 4 << 20;

/**
 * One non-blocking send of `buf[offset, offset + length)` to socket `fd`: the bytes the
 * kernel took, or −errno (the native device's linkSend). `settles`: they are the last bytes
 * the link's flush was owed for, and the send calls it off (no crossing of its own for that).
 */
export type SendNow = (
  fd: number,
  buf: Uint8Array,
  offset: number,
  length: number,
  settles: boolean,
) => number;

/** SendNow through the device's native linkSend (one closure per device). */
export function sendVia(native: { linkSend: SendNow }): SendNow {
  return (fd, buf, offset, length, settles) => native.linkSend(fd, buf, offset, length, settles);
}

/** A buffer and the last exact-length view of it handed to the socket. */
class Chunk {
  readonly buf: Buffer;
  /** it holds a request gathered beside the answers (markRequest) */
  requests = false;
  #view: Buffer | undefined;
  constructor(n: number) {
    this.buf = Buffer.allocUnsafeSlow(n);
  }
  view(n: number): Buffer {
    if (n === this.buf.length) return this.buf;
    const v = this.#view;
    if (v !== undefined && v.length === n) return v;
    this.#view = this.buf.subarray(0, n);
    return this.#view;
  }
}

/**
 * Where a target's answers gather before a flush: the connection that carries the answering
 * QP's own requests back (LinkClient), or the request's own connection (LinkServer's).
 */
export interface AnswerSink {
  readonly out: Outbox;
  /** in the listener's list of sinks to flush */
  dirty: boolean;
  readonly closed: boolean;
  /** Bytes waiting to go: in the socket and gathered. */
  readonly backlog: number;
  /** Writes what was gathered (when the connection can carry it). */
  flushOut(): void;
  /** Calls `fn` once the backlog drained, or the connection opened or closed. */
  whenWritable(fn: () => void): void;
}

export class Outbox {
  readonly #sock: Socket;
  readonly #written: ((requests: boolean) => void) | undefined;
  readonly #send: SendNow | undefined;
  #cur = new Chunk(SMALL);
  #used = 0;
  readonly #free: Chunk[] = [];
  readonly #inFlight = new Ring<Chunk>();
  /** one large buffer kept for the next large READ answer */
  #big: Chunk | undefined;
  /** the socket's descriptor once known (socketFd) */
  #fd = -1;
  /** the last flush's own send called the link's flush off (flush's `settles`) */
  #calledOff = false;

  /**
   * `written`: called as each buffer handed to the socket with a callback is through;
   * `requests` when it held a request (markRequest), not only answers.
   */
  constructor(sock: Socket, written?: (requests: boolean) => void, send?: SendNow) {
    this.#sock = sock;
    this.#written = written;
    this.#send = send;
  }

  /** Bytes gathered and not yet handed to the socket. */
  get used(): number {
    return this.#used;
  }

  /** Where the bytes reserve() made room for start. */
  get at(): number {
    return this.#used;
  }

  /** Room for `n` more bytes at `at`: the buffer to write them into, then commit(). */
  reserve(n: number): Buffer {
    const cur = this.#cur;
    if (this.#used + n <= cur.buf.length) return cur.buf;
    if (n <= cur.buf.length && this.#used <= MOVE_BYTES && cur.buf.length > SMALL) {
      // A large buffer holding a few answers (a READ that failed): those go out from a
      // small one, and the large one is reused in place.
      const small = this.#free.pop() ?? new Chunk(SMALL);
      copyBytes(cur.buf, 0, small.buf, 0, this.#used);
      small.requests = cur.requests;
      cur.requests = false;
      this.#write(small, this.#used);
      this.#used = 0;
      return cur.buf;
    }
    this.flush();
    if (n > this.#cur.buf.length) {
      this.#free.push(this.#cur);
      // A large READ answer: in the one large buffer kept, or one made for it.
      const big = this.#big;
      if (big !== undefined && big.buf.length >= n) {
        this.#big = undefined;
        this.#cur = big;
      } else this.#cur = new Chunk(n);
    }
    return this.#cur.buf;
  }

  commit(n: number): void {
    this.#used += n;
  }

  /** What was gathered since the last flush holds a request (its write is progress). */
  markRequest(): void {
    this.#cur.requests = true;
  }

  /**
   * Hands what was gathered to the socket. `settles`: these are the last bytes the link's
   * flush is owed for (SendNow); true when our own send carried that, so the flush is off.
   */
  flush(settles = false): boolean {
    const n = this.#used;
    if (n === 0) return false;
    const c = this.#cur;
    this.#used = 0;
    this.#calledOff = false;
    if (this.#inFlight.size === 0) {
      // Nothing of ours in the socket: sent by us, or written without a callback (one
      // allocates); when the kernel took it all at once the buffer is free again now.
      return this.#afterSend(n, this.#sendNow(c.buf, n, settles));
    }
    this.#inFlight.push(c);
    this.#sock.write(c.view(n), this.#onWritten);
    this.#cur = this.#free.pop() ?? new Chunk(SMALL);
    return this.#calledOff;
  }

  /**
   * The socket's descriptor when what is gathered may be sent by us now, outside node's
   * stream (nothing of ours queued in it, so the bytes keep their order), else -1: the
   * native linkTake sends a small request with what was gathered before it this way.
   */
  sendFd(): number {
    const sock = this.#sock;
    if (this.#send === undefined || this.#inFlight.size > 0) return -1;
    if (sock.writableLength > 0 || sock.writableCorked > 0) return -1;
    if (sock.connecting || sock.destroyed || !sock.writable) return -1;
    if (this.#fd < 0) this.#fd = socketFd(sock);
    return this.#fd;
  }

  /**
   * The current buffer's first `n` bytes (gathered and committed) were sent natively from
   * sendFd(), `sent` of them taken by the kernel; `settles` as flush's. As flush() ends.
   */
  sentNatively(n: number, sent: number, settles: boolean): boolean {
    this.#used = 0;
    this.#calledOff = settles;
    return this.#afterSend(n, sent);
  }

  /** flush() after its own send of the current buffer's `n` bytes took `sent` of them. */
  #afterSend(n: number, sent: number): boolean {
    const c = this.#cur;
    if (sent === n) {
      c.requests = false;
      return this.#calledOff;
    }
    // The rest behind what went (a view only then: the kernel's buffer was full).
    this.#sock.write(sent === 0 ? c.view(n) : c.buf.subarray(sent, n));
    if (this.#sock.writableLength === 0) {
      c.requests = false;
      return this.#calledOff;
    }
    this.#inFlight.push(c);
    this.#sock.write(EMPTY, this.#onWritten); // called once the one above is through
    this.#cur = this.#free.pop() ?? new Chunk(SMALL);
    return this.#calledOff;
  }

  /**
   * Sends `buf[0, n)` with one syscall of our own when nothing of the connection is queued in
   * node's stream (so the bytes keep their order); the bytes the kernel took. 0 when it cannot
   * or on an error: node's write then meets the error too and fails the connection.
   */
  #sendNow(buf: Buffer, n: number, settles: boolean): number {
    const send = this.#send;
    const sock = this.#sock;
    if (send === undefined || sock.writableLength > 0 || sock.writableCorked > 0) return 0;
    if (sock.connecting || sock.destroyed || !sock.writable) return 0; // after end(): node reports it
    // Looked up once: a socket keeps its descriptor until destroyed (checked just above).
    if (this.#fd < 0) this.#fd = socketFd(sock);
    const fd = this.#fd;
    if (fd < 0) return 0;
    const sent = send(fd, buf, 0, n, settles);
    this.#calledOff = settles;
    return Math.max(sent, 0);
  }

  #write(c: Chunk, n: number): void {
    this.#inFlight.push(c);
    this.#sock.write(c.view(n), this.#onWritten);
  }

  readonly #onWritten = (): void => {
    const c = this.#inFlight.shift();
    if (!c) return;
    const requests = c.requests;
    c.requests = false;
    this.#written?.(requests);
    if (c.buf.length === SMALL) {
      if (this.#free.length < 4) this.#free.push(c);
    } else if (c.buf.length <= BIG_KEEP && (this.#big?.buf.length ?? 0) < c.buf.length) {
      this.#big = c;
    }
  };
}

// The initiator side of the soft TCP link: one connection to a peer device's LinkServer,
// authenticated for the one remote QP a local QP is connected to (its key comes from that
// QP's endpoint), so one QP's large WRs never hold up another's. Answers are untrusted too: each is
// checked against the request it claims to answer before its data is used, and they must
// come in the order the requests went (the target runs them in order): an answer out of
// order, or for nothing asked, drops the connection.
//
// Steady state allocates nothing here: frames are the QP's reused buffers (header and
// payload, one write each), pending requests and writes live in rings of reused records,
// and the socket reads into one buffer of ours (`onread`).
import { connect, type Socket } from 'node:net';
import type { LinkAddress } from '../../../types.js';
import { ABI } from '../../abi.js';
import {
  answerDataBytes,
  type FrameBuffer,
  FrameReader,
  LINK_PROGRESS,
  PROGRESS_BYTES,
  REQ_HEADER,
  RES_HEADER,
  writeRequestHeader,
} from './frames.js';
import {
  HANDSHAKE_DEADLINE_MS,
  HELLO_BYTES,
  InitiatorHandshake,
  type LinkTarget,
  WELCOME_BYTES,
} from './handshake.js';
import { Ring } from './Ring.js';

/** A QP whose WRs travel over a LinkClient. */
export interface LinkOwner {
  /**
   * The peer's answer for the WR named by `token`; READ or atomic data are
   * `data[offset, offset + length)`, valid only during the call.
   */
  answer(
    token: number,
    outcome: number,
    status: number,
    rnrTimer: number,
    data: Uint8Array | undefined,
    offset: number,
    length: number,
  ): void;
  /** Bytes moved for this QP's own frames: the peer is alive for it. */
  progress(): void;
  /** The socket no longer reads `frame` (written, or the connection is gone). */
  released(frame: FrameBuffer): void;
}

const WC_REM_INV_REQ_ERR = 9;
const MAX_WC_STATUS = 21;
// The RNR timer a transport failure reports (ignored by the engine for that outcome).
const NO_RNR = 12;
/** A payload goes out in writes of this size: each one written is progress for the timer. */
export const LINK_CHUNK = 1 << 20;
const EMPTY = Buffer.alloc(0);
/** What one read from the socket takes at most (one buffer for the connection's life). */
const READ_BUFFER = 64 << 10;

/** A request on the wire, waiting for its answer (records reused). */
class Pending {
  id = 0;
  owner: LinkOwner | undefined;
  token = 0;
  /** bytes a successful answer must carry (READ, atomics); -1 for other opcodes */
  dataLength = -1;
  /** PROGRESS reports the target may still send: one per PROGRESS_BYTES of payload */
  progressLeft = 0;
  /** the frame, until it was handed to the socket (requests made before the handshake) */
  frame: FrameBuffer | undefined;
  frameLength = 0;
  /** the WR's length (a READ's too: the target refuses one over its frame limit) */
  length = 0;
}

/** One write handed to the socket: whose, and the frame to give back once written. */
class Written {
  owner: LinkOwner | undefined;
  frame: FrameBuffer | undefined;
  /** part of a frame written in several pieces */
  piece = false;
}

export class LinkClient {
  readonly #sock: Socket;
  /** requests in the order sent; answers come in this order */
  readonly #pending = new Ring<Pending>();
  readonly #writes = new Ring<Written>();
  readonly #sparePending: Pending[] = [];
  readonly #spareWritten: Written[] = [];
  readonly #handshake: InitiatorHandshake;
  readonly #reader: FrameReader;
  readonly #deadline: NodeJS.Timeout;
  #pre: Buffer | undefined = Buffer.alloc(0);
  #answered = false;
  #open = false;
  #nextId = 1;
  #dead = false;
  #corked = false;
  #batchDepth = 0;
  #batchFrames = 0;

  constructor(address: LinkAddress, target: LinkTarget) {
    this.#handshake = new InitiatorHandshake(Buffer.from(address.key, 'base64url'), target);
    const readBuffer = Buffer.allocUnsafe(READ_BUFFER);
    this.#reader = new FrameReader(
      RES_HEADER,
      (b, o) => this.#checkAnswer(b, o),
      (b, o, n) => this.#deliver(b, o, n),
    );
    this.#sock = connect({
      host: address.host,
      port: address.port,
      noDelay: true,
      onread: { buffer: readBuffer, callback: (n: number) => this.#onRead(readBuffer, n) },
    });
    this.#sock.unref();
    this.#deadline = setTimeout(() => this.#sock.destroy(), HANDSHAKE_DEADLINE_MS);
    this.#deadline.unref();
    const fail = () => this.#fail();
    this.#sock.on('error', fail);
    this.#sock.on('close', fail);
  }

  get dead(): boolean {
    return this.#dead;
  }

  #onRead(buf: Buffer, n: number): boolean {
    if (this.#dead) return false;
    let start = 0;
    if (this.#pre) {
      start = this.#authenticate(buf, n);
      if (start < 0 || start >= n) return true;
    }
    let ok = true;
    try {
      ok = this.#reader.push(buf, start, n);
    } catch {
      ok = false;
    }
    if (!ok) {
      this.#sock.destroy(); // 'close' then fails what is pending
      return false;
    }
    // Part of a large answer (a READ's data) arrived: progress for the WR it answers.
    if (this.#reader.partial) this.#pending.at(0)?.owner?.progress();
    return true;
  }

  /** Runs the handshake on what arrived; the offset of the bytes after it, or -1. */
  #authenticate(buf: Buffer, n: number): number {
    const had = (this.#pre as Buffer).length;
    const pre = Buffer.concat([this.#pre as Buffer, buf.subarray(0, n)]);
    const needed = HELLO_BYTES + WELCOME_BYTES;
    if (pre.length < HELLO_BYTES) {
      this.#pre = pre;
      return -1;
    }
    if (!this.#answered) {
      this.#answered = true;
      const auth = this.#handshake.answer(pre.subarray(0, HELLO_BYTES));
      if (!auth) {
        this.#sock.destroy();
        return -1;
      }
      this.#sock.write(auth);
    }
    if (pre.length < needed) {
      this.#pre = pre;
      return -1;
    }
    if (!this.#handshake.verify(pre.subarray(HELLO_BYTES, needed))) {
      this.#sock.destroy(); // not the device (or QP) the endpoint named
      return -1;
    }
    clearTimeout(this.#deadline);
    this.#pre = undefined;
    this.#open = true;
    // Requests made meanwhile go out now, in order (a list: #write may drop one).
    const waiting: Pending[] = [];
    for (let i = 0; i < this.#pending.size; i++) waiting.push(this.#pending.at(i) as Pending);
    this.beginBatch();
    for (const p of waiting) if (p.frame) this.#write(p);
    this.endBatch();
    return needed - had;
  }

  #fail(): void {
    if (this.#dead) return;
    clearTimeout(this.#deadline);
    this.#dead = true;
    const failed: Pending[] = [];
    for (let p = this.#pending.shift(); p; p = this.#pending.shift()) failed.push(p);
    for (const p of failed) {
      const owner = p.owner as LinkOwner;
      if (p.frame) owner.released(p.frame); // never handed to the socket
      p.frame = undefined;
      owner.answer(p.token, ABI.LINK_TRANSPORT, 0, NO_RNR, undefined, 0, 0);
    }
  }

  /** The request `id` names among those pending (PROGRESS may name any), or undefined. */
  #find(id: number): Pending | undefined {
    const first = this.#pending.at(0);
    if (!first) return undefined;
    const i = (id - first.id) >>> 0;
    const p = this.#pending.at(i);
    return p && p.id === id ? p : undefined;
  }

  /** The total length of the answer whose header is at `b[o..]`, or -1 if it cannot be one. */
  #checkAnswer(b: Buffer, o: number): number {
    const len = b.readUInt32LE(o);
    const id = b.readUInt32LE(o + 4);
    const outcome = b[o + 8] as number;
    const status = b[o + 9] as number;
    if (outcome === LINK_PROGRESS) {
      // More reports than the request has payload for: a target stalling us on purpose.
      const p = this.#find(id);
      if (len !== RES_HEADER || !p || p.progressLeft <= 0) return -1;
      p.progressLeft--;
      return len;
    }
    // Only the oldest request can be answered: the target runs them in order.
    const p = this.#pending.at(0);
    if (!p || p.id !== id || p.frame) return -1;
    if (outcome > ABI.LINK_DISCARDED || status > MAX_WC_STATUS) return -1;
    if (len === RES_HEADER) return len;
    // Data only for a successful READ or atomic we asked for, and exactly its length.
    const ok = p.dataLength === len - RES_HEADER && outcome === ABI.LINK_DONE && status === 0;
    return ok ? len : -1;
  }

  #deliver(b: Buffer, o: number, len: number): boolean {
    const id = b.readUInt32LE(o + 4);
    const outcome = b[o + 8] as number;
    if (outcome === LINK_PROGRESS) {
      this.#find(id)?.owner?.progress(); // checked: it is pending
      return true;
    }
    const p = this.#pending.shift() as Pending; // checked: the oldest
    const owner = p.owner as LinkOwner;
    const status = b[o + 9] as number;
    const token = p.token;
    const wantsData = p.dataLength > 0;
    p.owner = undefined;
    this.#sparePending.push(p);
    if (wantsData && outcome === ABI.LINK_DONE && status === 0 && len === RES_HEADER) {
      // a successful READ or atomic without its data
      owner.answer(token, ABI.LINK_TRANSPORT, 0, NO_RNR, undefined, 0, 0);
      return true;
    }
    const rnr = b.readUInt16LE(o + 10);
    if (len > RES_HEADER)
      owner.answer(token, outcome, status, rnr, b, o + RES_HEADER, len - RES_HEADER);
    else owner.answer(token, outcome, status, rnr, undefined, 0, 0);
    return true;
  }

  /**
   * Frames sent until endBatch() leave in one system call (a window taken at once). The
   * socket is corked only from a batch's second frame on: a lone frame is written directly
   * (corking buffers it, which allocates).
   */
  beginBatch(): void {
    if (this.#batchDepth++ === 0) this.#batchFrames = 0;
  }

  endBatch(): void {
    if (--this.#batchDepth > 0) return;
    if (this.#corked) {
      this.#corked = false;
      this.#sock.uncork();
    }
  }

  /**
   * Sends the WR described by `hdr` (ABI link words); its payload (hdr[LINK_LENGTH] bytes;
   * none for READ) is in `frame` after REQ_HEADER bytes this writes the header into.
   * `owner.answer` gets the answer. The socket reads `frame` until `owner.released(frame)`:
   * the caller does not reuse it before (no copy here, and nothing is sent twice on a live
   * connection).
   */
  send(hdr: Float64Array, frame: FrameBuffer, owner: LinkOwner): void {
    const token = hdr[ABI.LINK_TOKEN] as number;
    const opcode = hdr[ABI.LINK_OPCODE] as number;
    const isRead = opcode === ABI.OP_RDMA_READ;
    const length = hdr[ABI.LINK_LENGTH] as number;
    const bytes = isRead ? 0 : length;
    if (this.#dead || (length > this.#handshake.maxPayload && this.#open)) {
      // Gone, or more than the target takes in one frame: refused as a responder refuses
      // a message over its limit.
      owner.released(frame);
      const outcome = this.#dead ? ABI.LINK_TRANSPORT : ABI.LINK_DONE;
      const status = this.#dead ? 0 : WC_REM_INV_REQ_ERR;
      setImmediate(() =>
        owner.answer(token, outcome, status, this.#dead ? NO_RNR : 0, undefined, 0, 0),
      );
      return;
    }
    const id = this.#nextId;
    this.#nextId = (this.#nextId + 1) >>> 0 || 1;
    // The header is written now: `hdr` is the QP's, rewritten by its next take.
    writeRequestHeader(frame.buf, id, hdr, bytes);
    const data = answerDataBytes(opcode, length);
    const p = this.#sparePending.pop() ?? new Pending();
    p.id = id;
    p.owner = owner;
    p.token = token;
    p.dataLength = data > 0 || isRead ? data : -1;
    p.progressLeft = Math.floor(bytes / PROGRESS_BYTES);
    p.frame = frame;
    p.frameLength = REQ_HEADER + bytes;
    p.length = length;
    this.#pending.push(p);
    if (this.#open) this.#write(p);
  }

  #write(p: Pending): void {
    const frame = p.frame as FrameBuffer;
    const owner = p.owner as LinkOwner;
    p.frame = undefined;
    if (p.length > this.#handshake.maxPayload) {
      // Learnt at the handshake: more than the target takes in one frame.
      this.#drop(p);
      owner.released(frame);
      setImmediate(() =>
        owner.answer(p.token, ABI.LINK_DONE, WC_REM_INV_REQ_ERR, 0, undefined, 0, 0),
      );
      return;
    }
    const sock = this.#sock;
    const len = p.frameLength;
    if (this.#batchDepth > 0 && this.#batchFrames++ === 1 && !this.#corked) {
      this.#corked = true;
      sock.cork();
    }
    if (len <= REQ_HEADER + LINK_CHUNK) {
      // One write for header and payload.
      if (this.#writes.size === 0 && !this.#corked) {
        // Nothing of ours in the socket: written without a callback (one allocates), and
        // when the kernel took it all at once (writableLength 0) the frame is free now.
        sock.write(frame.view(len));
        if (sock.writableLength === 0) {
          owner.released(frame);
          return;
        }
        // Still in the socket: an empty write behind it says when it is through.
        this.#track(owner, frame, false);
        sock.write(EMPTY, this.#onWritten);
        return;
      }
      this.#track(owner, frame, false);
      sock.write(frame.view(len), this.#onWritten);
      return;
    }
    // Large: separate writes, so each one the kernel takes shows the peer is reading,
    // and the frames of other QPs behind it keep their timers alive too.
    for (let off = 0; off < len; off += LINK_CHUNK) {
      const end = Math.min(len, off + LINK_CHUNK);
      this.#track(owner, end === len ? frame : undefined, true);
      sock.write(frame.buf.subarray(off, end), this.#onWritten);
    }
  }

  /** Takes `p` out of the pending ring (it was never written; requests after it stay). */
  #drop(p: Pending): void {
    const n = this.#pending.size;
    for (let i = 0; i < n; i++) {
      const q = this.#pending.shift() as Pending;
      if (q !== p) this.#pending.push(q);
    }
  }

  #track(owner: LinkOwner, frame: FrameBuffer | undefined, piece: boolean): void {
    const w = this.#spareWritten.pop() ?? new Written();
    w.owner = owner;
    w.frame = frame;
    w.piece = piece;
    this.#writes.push(w);
  }

  // Writes complete in order: each call is for the oldest one tracked.
  readonly #onWritten = (): void => {
    const w = this.#writes.shift();
    if (!w) return;
    const owner = w.owner as LinkOwner;
    const frame = w.frame;
    const piece = w.piece;
    w.owner = undefined;
    w.frame = undefined;
    this.#spareWritten.push(w);
    if (frame) owner.released(frame);
    if (this.#dead) return;
    // The socket moves: progress for this write's QP if its frame is large, and for the
    // QPs whose frames wait behind it (they cannot move before it).
    if (piece) owner.progress();
    let last: LinkOwner | undefined = piece ? owner : undefined;
    for (let i = 0; i < this.#writes.size; i++) {
      const next = (this.#writes.at(i) as Written).owner as LinkOwner;
      if (next !== last) next.progress();
      last = next;
    }
  };

  close(): void {
    this.#sock.destroy();
  }
}

// The initiator side of the soft TCP link: one connection to the remote QP a local QP is
// connected to, authenticated for that QP (its key comes from that QP's endpoint), so one
// QP's large WRs never hold up another's. Link protocol 4: one connection carries both QPs
// of the pair — the one the QP with the lower link key dials (or the only one that can:
// its device does not listen); the other QP adopts it once its dialer proved the key of
// that QP's RC peer (LinkServer, handshake.ts), and sends its own requests on it. Its
// answers to the remote QP's requests leave in the same write as its next request, and
// TCP's ACK of one direction rides on the other's data. The dialing side reads the
// connection with its device's LinkServer (requests to its QP, answers to its own), the
// adopting side's LinkServer reads it already. Answers to this QP's requests are
// untrusted too, each is checked against the request it claims
// to answer before its data is used, and they must come in the order the requests went (the
// target runs them in order): an answer out of order, or for nothing asked, drops the
// connection that carried it. Answers to requests given up (a connection lost) are stale:
// recognised by their id (ids are process-wide, increasing) and skipped.
//
// Steady state allocates nothing here: small requests are gathered by the engine straight
// into the connection's Outbox beside the answers, larger frames are the QP's reused buffers
// (header and payload, one write each), pending requests and writes live in rings of reused
// records, and the socket reads into one buffer of ours (`onread`).
import { connect, type Socket } from 'node:net';
import type { LinkAddress } from '../../../types.js';
import { ABI } from '../../abi.js';
import {
  answerDataBytes,
  answerLength,
  type FrameBuffer,
  FrameReader,
  frameReqId,
  isAnswer,
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
import type { AcceptedLink } from './LinkServer.js';
import { type AnswerSink, Outbox, type SendNow } from './Outbox.js';
import { Ring } from './Ring.js';
import { socketFd } from './socketFd.js';

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

/** How a dialed connection is read once authenticated: by the device's LinkServer. */
export type ServeDialed = (sock: Socket) => (buf: Buffer, start: number, end: number) => boolean;

/** What dialing needs beyond the remote QP's address: the dialing QP's own key and reader. */
export interface DialOptions {
  /** the dialing QP's own link key (its device listens), proven to the target (protocol 4) */
  ownKey?: Buffer | undefined;
  /** what this device accepts per frame (requests sent back on the connection) */
  ownMaxPayload?: number;
  /** reads the connection: requests to the dialing QP and answers to it (else answers only) */
  serve?: ServeDialed | undefined;
  /**
   * told when this connection wrote what it had gathered (LinkServer.settle); `calledOff`:
   * the write itself called the link's flush off (`lastOwed` said it could)
   */
  flushed?: ((calledOff: boolean) => void) | undefined;
  /** true when `sink`'s gathered bytes are the last the link's flush is owed for */
  lastOwed?: ((sink: AnswerSink) => boolean) | undefined;
  /**
   * The buffer to read into, shared with the LinkServer that reads the connection (`serve`:
   * each read is run before the next is made, and what is kept past one is copied).
   */
  readBuffer?: Buffer | undefined;
  /** writes gathered frames itself when nothing is queued in the socket (Outbox) */
  send?: SendNow | undefined;
  /** delivers the wake-ups a read's answers owe this device's CQs (SoftNativeDevice.wakeOwed) */
  wake?: (() => void) | undefined;
}

/** A payload goes out in writes of this size: each one written is progress for the timer. */
export const LINK_CHUNK = 1 << 20;
const EMPTY = Buffer.alloc(0);
/** What one read takes at most without the listener's shared buffer (DialOptions.readBuffer). */
const READ_BUFFER = 64 << 10;
/** Requests with at most this much payload are gathered into the Outbox beside the answers. */
export const SMALL_REQUEST = 4 << 10;

// Request ids, process-wide: an answer to a request of a connection given up carries an id
// older than any request of its successor, so it is recognised as stale and skipped.
let nextReqId = 1;
function takeReqId(): number {
  const id = nextReqId;
  nextReqId = (nextReqId + 1) >>> 0 || 1;
  return id;
}

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

export class LinkClient implements AnswerSink {
  readonly #sock: Socket;
  /** answers to the remote QP's requests, and small requests, gathered for one write */
  readonly out: Outbox;
  dirty = false;
  /** ids in [#firstId, #staleBefore) answer requests given up: their answers are skipped */
  #staleBefore: number;
  /** the first id of this QP's connections (this one and those it replaced) */
  readonly #firstId: number;
  /** the most data a stale answer may carry (the largest READ given up) */
  #staleData: number;
  /** waiting for the connection to open or drain (whenWritable) */
  #waiters: (() => void)[] = [];
  /** waiting for the open connection to drain (whenWritable) */
  #drainWaiters: (() => void)[] = [];
  /** waiting for our frames to leave the socket (whenFramesOut), and a spare list */
  #outWaiters: (() => void)[] = [];
  #outSpare: (() => void)[] = [];
  /** requests in the order sent; answers come in this order */
  readonly #pending = new Ring<Pending>();
  readonly #writes = new Ring<Written>();
  readonly #sparePending: Pending[] = [];
  readonly #spareWritten: Written[] = [];
  readonly #handshake: InitiatorHandshake | undefined;
  readonly #reader: FrameReader | undefined;
  readonly #wakeCqs: (() => void) | undefined;
  readonly #deadline: NodeJS.Timeout | undefined;
  readonly #serve: ServeDialed | undefined;
  readonly #flushed: ((calledOff: boolean) => void) | undefined;
  readonly #lastOwed: ((sink: AnswerSink) => boolean) | undefined;
  /** reads the authenticated connection (DialOptions.serve), else #reader does */
  #served: ((buf: Buffer, start: number, end: number) => boolean) | undefined;
  /** what the target accepts per frame (its HELLO, or the dialer's AUTH when adopted) */
  #maxPayload = 0;
  #pre: Buffer | undefined = Buffer.alloc(0);
  #answered = false;
  #open = false;
  /** authenticated once (a connection that never opened is no way back for answers) */
  #opened = false;
  #dead = false;
  #corked = false;
  #batchDepth = 0;
  #batchFrames = 0;
  /** the request the PROGRESS frame checkAnswer just accepted names (delivered next) */
  #progressFor: Pending | undefined;

  /**
   * Dials `address` (`dial`), or adopts a connection the remote QP dialed (`adopted`: already
   * authenticated, read by the LinkServer). `previous`: the connection this one replaces
   * (its stale answers are recognised).
   */
  constructor(
    address: LinkAddress | AcceptedLink,
    target: LinkTarget | undefined,
    previous?: LinkClient,
    dial: DialOptions = {},
  ) {
    this.#staleBefore = previous ? previous.#staleBefore : nextReqId;
    this.#firstId = previous ? previous.#firstId : nextReqId;
    this.#staleData = previous ? previous.#staleData : ABI.ATOMIC_BYTES;
    this.#serve = dial.serve;
    this.#wakeCqs = dial.wake;
    this.#flushed = dial.flushed;
    this.#lastOwed = dial.lastOwed;
    if ('sock' in address) {
      // Adopted: the remote QP dialed it and proved the key of this QP's peer.
      this.#sock = address.sock;
      this.out = address.out;
      address.written = this.#outWritten;
      this.#maxPayload = address.peerMaxPayload;
      this.#handshake = undefined;
      this.#reader = undefined;
      this.#deadline = undefined;
      this.#pre = undefined;
      this.#open = true;
      this.#opened = true;
      const failed = () => this.#fail();
      this.#sock.on('close', failed);
      if (this.#sock.destroyed) this.#fail();
      return;
    }
    this.#handshake = new InitiatorHandshake(
      Buffer.from(address.key, 'base64url'),
      target as LinkTarget,
      dial.ownKey,
      dial.ownMaxPayload,
    );
    const readBuffer = dial.readBuffer ?? Buffer.allocUnsafe(READ_BUFFER);
    this.#reader = new FrameReader(
      RES_HEADER,
      (b, o) => this.checkAnswer(b, o),
      (b, o, n) => this.deliverAnswer(b, o, n),
    );
    this.#sock = connect({
      host: address.host,
      port: address.port,
      noDelay: true,
      onread: { buffer: readBuffer, callback: (n: number) => this.#onRead(readBuffer, n) },
    });
    this.#sock.unref();
    this.out = new Outbox(this.#sock, this.#outWritten, dial.send);
    this.#deadline = setTimeout(() => this.#sock.destroy(), HANDSHAKE_DEADLINE_MS);
    this.#deadline.unref();
    const fail = () => this.#fail();
    this.#sock.on('error', fail);
    this.#sock.on('close', fail);
  }

  get dead(): boolean {
    return this.#dead;
  }

  /** It authenticated, at some point. */
  get opened(): boolean {
    return this.#opened;
  }

  /** Authenticated and not failed: requests may be gathered into `out`. */
  get open(): boolean {
    return this.#open && !this.#dead;
  }

  get closed(): boolean {
    return this.#dead;
  }

  get backlog(): number {
    return this.#sock.writableLength + this.out.used;
  }

  flushOut(): void {
    if (this.#open && !this.#dead) this.out.flush();
  }

  whenWritable(fn: () => void): void {
    if (this.#dead) fn();
    else if (this.#open) {
      // Called on drain or on failure: a target connection stalled behind this one must not
      // wait for a 'drain' a dead socket never emits (it would keep its slot and never read
      // its own peer's close).
      if (this.#drainWaiters.push(fn) === 1) this.#sock.once('drain', this.#drained);
    } else this.#waiters.push(fn);
  }

  readonly #drained = (): void => {
    const w = this.#drainWaiters;
    if (w.length === 0) return;
    this.#drainWaiters = [];
    for (const fn of w) fn();
  };

  #wake(): void {
    this.#framesOut();
    const w = this.#waiters;
    if (w.length === 0) return;
    this.#waiters = [];
    for (const fn of w) fn();
  }

  /**
   * True while frames of ours are in the socket (open): a large WR behind them waits for
   * them (whenFramesOut) and then goes straight from registered memory (sendDirect),
   * instead of being copied into a frame only to queue behind them.
   */
  get framesQueued(): boolean {
    return this.#open && !this.#dead && this.#writes.size > 0;
  }

  /** Calls `fn` once when no frame of ours is in the socket any more, or the connection failed. */
  whenFramesOut(fn: () => void): void {
    if (!this.#outWaiters.includes(fn)) this.#outWaiters.push(fn);
  }

  #framesOut(): void {
    const w = this.#outWaiters;
    if (w.length === 0) return;
    // Swapped with the spare list: callbacks may register again (no array per call).
    this.#outWaiters = this.#outSpare;
    this.#outSpare = w;
    for (let i = 0; i < w.length; i++) (w[i] as () => void)();
    w.length = 0;
  }

  /**
   * A buffer of `out` went through the socket: when it held a request of this QP's, the
   * peer is reading them (progress for the oldest one waiting). A buffer of answers only
   * says nothing about our requests: a peer that sends requests and never answers ours must
   * not keep our timer alive.
   */
  readonly #outWritten = (requests: boolean): void => {
    if (requests && !this.#dead) this.#pending.at(0)?.owner?.progress();
  };

  /**
   * Part of a large answer (a READ's data) to request `id` arrived, on whichever connection
   * carries it: progress only when it answers the oldest request (whose timer runs) — a
   * stale answer trickled in must not keep that timer alive.
   */
  answerArriving(id: number): void {
    const first = this.#pending.at(0);
    if (first !== undefined && first.id === id) first.owner?.progress();
  }
  #onRead(buf: Buffer, n: number): boolean {
    if (this.#dead) return false;
    let start = 0;
    if (this.#pre) {
      start = this.#authenticate(buf, n);
      if (start < 0 || start >= n) return true;
    }
    if (this.#served) return this.#served(buf, start, n);
    const reader = this.#reader as FrameReader;
    let ok = true;
    try {
      ok = reader.push(buf, start, n);
    } catch {
      ok = false;
    }
    // The read's completions (linkDone's) as one batch, in this callback.
    this.#wakeCqs?.();
    if (!ok) {
      this.#sock.destroy(); // 'close' then fails what is pending
      return false;
    }
    // Part of a large answer (a READ's data) arrived: progress for the WR it answers.
    const partial = reader.partial;
    if (partial) this.answerArriving(frameReqId(partial, 0));
    return true;
  }

  /** Runs the handshake on what arrived; the offset of the bytes after it, or -1. */
  #authenticate(buf: Buffer, n: number): number {
    const hs = this.#handshake as InitiatorHandshake;
    const had = (this.#pre as Buffer).length;
    const pre = Buffer.concat([this.#pre as Buffer, buf.subarray(0, n)]);
    const needed = HELLO_BYTES + WELCOME_BYTES;
    if (pre.length < HELLO_BYTES) {
      this.#pre = pre;
      return -1;
    }
    if (!this.#answered) {
      this.#answered = true;
      const auth = hs.answer(pre.subarray(0, HELLO_BYTES));
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
    if (!hs.verify(pre.subarray(HELLO_BYTES, needed))) {
      this.#sock.destroy(); // not the device (or QP) the endpoint named
      return -1;
    }
    clearTimeout(this.#deadline);
    this.#pre = undefined;
    this.#maxPayload = hs.maxPayload;
    // Both QPs' frames come on it (protocol 4): its device's LinkServer reads them.
    this.#served = this.#serve?.(this.#sock);
    this.#open = true;
    this.#opened = true;
    // Requests made meanwhile go out now, in order (a list: #write may drop one).
    const waiting: Pending[] = [];
    for (let i = 0; i < this.#pending.size; i++) waiting.push(this.#pending.at(i) as Pending);
    this.beginBatch();
    for (const p of waiting) if (p.frame) this.#write(p);
    this.endBatch(); // with the answers gathered meanwhile
    this.#wake();
    return needed - had;
  }

  #fail(): void {
    if (this.#dead) return;
    clearTimeout(this.#deadline);
    this.#dead = true;
    this.#abandon();
    this.#wake();
    this.#drained();
  }

  /**
   * Answers every pending request TRANSPORT (the engine sends the window again, from its
   * head, once the ACK timer has run); answers still on their way to them become stale.
   */
  #abandon(): void {
    this.#staleBefore = nextReqId;
    const failed: Pending[] = [];
    for (let p = this.#pending.shift(); p; p = this.#pending.shift()) failed.push(p);
    for (const p of failed) {
      const owner = p.owner as LinkOwner;
      if (p.frame) owner.released(p.frame); // never handed to the socket
      p.frame = undefined;
      if (p.dataLength > this.#staleData) this.#staleData = p.dataLength;
      owner.answer(p.token, ABI.LINK_TRANSPORT, 0, ABI.LINK_NO_RNR, undefined, 0, 0);
    }
  }

  /**
   * A connection that carries answers to this QP's requests closed: answers on it are lost,
   * and on a live connection nothing is sent twice by itself, so the window goes out again
   * (the target answers what it ran from memory). This connection stays: closing it would
   * lose the answers it carries for the remote's requests in turn.
   */
  answersLost(): void {
    if (!this.#dead && this.#pending.size > 0) this.#abandon();
  }

  /** The request `id` names among those pending (PROGRESS may name any), or undefined. */
  #find(id: number): Pending | undefined {
    for (let i = 0; i < this.#pending.size; i++) {
      const p = this.#pending.at(i) as Pending;
      if (p.id === id) return p;
    }
    return undefined;
  }

  /** True when `id` names a request given up (here, or on a connection this one replaced). */
  #isStale(id: number): boolean {
    return ((id - this.#firstId) | 0) >= 0 && ((id - this.#staleBefore) | 0) < 0;
  }

  /**
   * The total length of the answer whose header is at `b[o..]` (on whichever connection
   * carries them), or -1 if it cannot be one.
   */
  checkAnswer(b: Buffer, o: number): number {
    if (!isAnswer(b, o)) return -1;
    const len = answerLength(b, o);
    const id = b.readUInt32LE(o + 4);
    const outcome = b[o + 8] as number;
    const status = b[o + 9] as number;
    if (len < RES_HEADER) return -1;
    if (outcome === LINK_PROGRESS) {
      if (len !== RES_HEADER) return -1;
      // For a request answered already (answers may overtake it on another connection) or
      // given up: nothing to act on. More reports than the request has payload for: a
      // target stalling us on purpose.
      const p = this.#find(id);
      this.#progressFor = p;
      if (!p) return len;
      if (p.progressLeft <= 0) return -1;
      p.progressLeft--;
      return len;
    }
    if (outcome > ABI.LINK_DISCARDED || status > ABI.WC_STATUS_LAST) return -1;
    // Only the oldest request can be answered: the target runs them in order.
    const p = this.#pending.at(0);
    if (!p || p.id !== id || p.frame) {
      // An answer to a request given up is skipped (no bigger than one could be).
      return this.#isStale(id) && len - RES_HEADER <= this.#staleData ? len : -1;
    }
    if (len === RES_HEADER) return len;
    // Data only for a successful READ or atomic we asked for, and exactly its length.
    const ok = p.dataLength === len - RES_HEADER && outcome === ABI.LINK_DONE && status === 0;
    return ok ? len : -1;
  }

  /** Acts on the answer checkAnswer() accepted (whole at `b[o, o + len)`). */
  deliverAnswer(b: Buffer, o: number, len: number): boolean {
    const id = b.readUInt32LE(o + 4);
    const outcome = b[o + 8] as number;
    if (outcome === LINK_PROGRESS) {
      // A PROGRESS frame is its header alone: delivered right after checkAnswer found it.
      const p = this.#progressFor;
      this.#progressFor = undefined;
      if (p !== undefined && p.id === id) p.owner?.progress();
      return true;
    }
    const first = this.#pending.at(0);
    // Stale (checked), or given up while its data arrived: nothing to act on.
    if (!first || first.id !== id || first.frame) return true;
    const p = this.#pending.shift() as Pending;
    const owner = p.owner as LinkOwner;
    const status = b[o + 9] as number;
    const token = p.token;
    const wantsData = p.dataLength > 0;
    p.owner = undefined;
    this.#sparePending.push(p);
    if (wantsData && outcome === ABI.LINK_DONE && status === 0 && len === RES_HEADER) {
      // a successful READ or atomic without its data
      owner.answer(token, ABI.LINK_TRANSPORT, 0, ABI.LINK_NO_RNR, undefined, 0, 0);
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
    // Small requests gathered, with the answers waiting beside them: one write.
    if (this.out.used === 0 || !this.#open || this.#dead) return;
    const calledOff = this.out.flush(this.#lastOwed?.(this) === true);
    this.#flushed?.(calledOff);
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
    if (this.#dead || (length > this.#maxPayload && this.#open)) {
      // Gone, or more than the target takes in one frame: refused as a responder refuses
      // a message over its limit.
      owner.released(frame);
      const outcome = this.#dead ? ABI.LINK_TRANSPORT : ABI.LINK_DONE;
      const status = this.#dead ? 0 : ABI.WC_REM_INV_REQ_ERR;
      setImmediate(() =>
        owner.answer(token, outcome, status, this.#dead ? ABI.LINK_NO_RNR : 0, undefined, 0, 0),
      );
      return;
    }
    const id = takeReqId();
    // The header is written now: `hdr` is the QP's, rewritten by its next take.
    writeRequestHeader(frame.buf, 0, id, hdr, bytes);
    const p = this.#track(id, hdr, owner);
    p.frame = frame;
    p.frameLength = REQ_HEADER + bytes;
    if (this.#open) this.#write(p);
  }

  /** The id the next request will carry (linkTake writes its header with it). */
  get nextReqId(): number {
    return nextReqId;
  }

  /** What the target takes per frame (a WR longer is refused, not sent). */
  get maxPayload(): number {
    return this.#maxPayload;
  }

  /**
   * The socket's descriptor when the native take may send gathered bytes itself now (open,
   * outside any outer batch and cork, nothing of ours queued in node's stream), else -1.
   */
  sendFd(): number {
    if (!this.#open || this.#dead || this.#corked || this.#batchDepth !== 1) return -1;
    return this.out.sendFd();
  }

  /** True when what is gathered now is the last the link's flush is owed for (settles). */
  get settles(): boolean {
    return this.#lastOwed?.(this) === true;
  }

  /**
   * Sends the WR described by `hdr` whose payload the engine gathered into `out` after
   * REQ_HEADER bytes at `out.at` (only while open, payload at most SMALL_REQUEST): it leaves
   * with the answers gathered beside it, at endBatch(). `headed`: the native take wrote its
   * header already, with the id nextReqId named, and it may have sent the lot itself
   * (hdr[LINK_SENT] ≥ 0: the kernel took that many bytes; `settles` as it was told).
   */
  sendGathered(hdr: Float64Array, owner: LinkOwner, headed = false, settles = false): void {
    const opcode = hdr[ABI.LINK_OPCODE] as number;
    const length = hdr[ABI.LINK_LENGTH] as number;
    const bytes = opcode === ABI.OP_RDMA_READ ? 0 : length;
    if (length > this.#maxPayload) {
      // More than the target takes in one frame: refused, as a responder refuses it.
      const token = hdr[ABI.LINK_TOKEN] as number;
      setImmediate(() =>
        owner.answer(token, ABI.LINK_DONE, ABI.WC_REM_INV_REQ_ERR, 0, undefined, 0, 0),
      );
      return;
    }
    const id = takeReqId();
    const out = this.out;
    if (!headed) writeRequestHeader(out.reserve(0), out.at, id, hdr, bytes);
    out.commit(REQ_HEADER + bytes);
    out.markRequest();
    const p = this.#track(id, hdr, owner);
    p.frame = undefined;
    p.frameLength = REQ_HEADER + bytes;
    const sent = headed ? (hdr[ABI.LINK_SENT] as number) : -1;
    if (sent >= 0) {
      // Sent by the take with everything gathered before it: as endBatch's flush ends.
      const calledOff = out.sentNatively(out.used, sent, settles);
      this.#flushed?.(calledOff);
    }
  }

  /** A pending record for request `id` (the WR `hdr` describes), in the ring. */
  #track(id: number, hdr: Float64Array, owner: LinkOwner): Pending {
    const opcode = hdr[ABI.LINK_OPCODE] as number;
    const isRead = opcode === ABI.OP_RDMA_READ;
    const length = hdr[ABI.LINK_LENGTH] as number;
    const data = answerDataBytes(opcode, length);
    const p = this.#sparePending.pop() ?? new Pending();
    p.id = id;
    p.owner = owner;
    p.token = hdr[ABI.LINK_TOKEN] as number;
    p.dataLength = data > 0 || isRead ? data : -1;
    p.progressLeft = Math.floor((isRead ? 0 : length) / PROGRESS_BYTES);
    p.length = length;
    this.#pending.push(p);
    return p;
  }

  #write(p: Pending): void {
    const frame = p.frame as FrameBuffer;
    const owner = p.owner as LinkOwner;
    p.frame = undefined;
    if (p.length > this.#maxPayload) {
      // Learnt at the handshake: more than the target takes in one frame.
      this.#drop(p);
      owner.released(frame);
      setImmediate(() =>
        owner.answer(p.token, ABI.LINK_DONE, ABI.WC_REM_INV_REQ_ERR, 0, undefined, 0, 0),
      );
      return;
    }
    const sock = this.#sock;
    const len = p.frameLength;
    // Requests gathered into the Outbox before this one go first (the QP's order).
    if (this.out.used > 0) this.out.flush();
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
        this.#trackWrite(owner, frame, false);
        sock.write(EMPTY, this.#onWritten);
        return;
      }
      this.#trackWrite(owner, frame, false);
      sock.write(frame.view(len), this.#onWritten);
      return;
    }
    this.#writePieces(owner, frame, 0, len);
  }

  /**
   * Frame bytes [from, len) in separate writes of LINK_CHUNK: each one the kernel takes
   * shows the peer is reading (progress), and the frames of other QPs behind it keep their
   * timers alive too. The frame is released once the last is through.
   */
  #writePieces(owner: LinkOwner, frame: FrameBuffer, from: number, len: number): void {
    for (let off = from; off < len; off += LINK_CHUNK) {
      const end = Math.min(len, off + LINK_CHUNK);
      this.#trackWrite(owner, end === len ? frame : undefined, true);
      this.#sock.write(frame.buf.subarray(off, end), this.#onWritten);
    }
  }

  /**
   * The socket's descriptor when a frame may be written to it directly now (nothing of
   * ours queued in it or gathered before, so the bytes keep their order), else -1.
   */
  directFd(): number {
    if (!this.#open || this.#dead || this.#corked || this.#writes.size > 0) return -1;
    if (this.out.used > 0) this.out.flush(); // requests gathered before go first
    if (this.#sock.writableLength > 0) return -1;
    return socketFd(this.#sock);
  }

  /**
   * Sends the WR described by `hdr` (a WRITE or SEND taken deferred: its payload still in
   * registered memory) over `fd` (directFd(), in this same turn): `write` writes the header
   * this puts in `frame` and the payload straight from that memory, without copying what
   * the kernel takes, copies the rest into `frame` and returns the bytes written (-1: the
   * take was not deferred). The rest goes through the socket as a large frame's pieces.
   */
  sendDirect(
    hdr: Float64Array,
    frame: FrameBuffer,
    owner: LinkOwner,
    fd: number,
    write: (fd: number, buf: Buffer, headerBytes: number) => number,
  ): void {
    const length = hdr[ABI.LINK_LENGTH] as number;
    if (length > this.#maxPayload) {
      this.send(hdr, frame, owner); // refused there, as any WR over the target's limit
      return;
    }
    const id = takeReqId();
    writeRequestHeader(frame.buf, 0, id, hdr, length);
    const p = this.#track(id, hdr, owner);
    const len = REQ_HEADER + length;
    p.frameLength = len;
    const n = write(fd, frame.buf, REQ_HEADER);
    if (n < 0) {
      // Its payload is nowhere: this connection fails and the window goes again.
      p.frame = frame;
      this.#sock.destroy();
      return;
    }
    p.frame = undefined;
    if (n >= len) {
      owner.released(frame); // all in the kernel: no write of ours holds the frame
      return;
    }
    this.#writePieces(owner, frame, n, len);
  }

  /** Takes `p` out of the pending ring (it was never written; requests after it stay). */
  #drop(p: Pending): void {
    const n = this.#pending.size;
    for (let i = 0; i < n; i++) {
      const q = this.#pending.shift() as Pending;
      if (q !== p) this.#pending.push(q);
    }
  }

  #trackWrite(owner: LinkOwner, frame: FrameBuffer | undefined, piece: boolean): void {
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
    if (this.#writes.size === 0) this.#framesOut();
  };

  close(): void {
    this.#sock.destroy();
  }
}

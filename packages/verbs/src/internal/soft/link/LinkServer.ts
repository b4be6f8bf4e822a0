// The target side of the soft TCP link: authenticates each connection for the one QP it
// proved the key of (handshake.ts), then runs each request to that QP with the device's
// responder (the same logic as the shared-memory path) and answers it — on that QP's own
// connection to the request's source QP (its LinkClient: the answer leaves in one write
// with that QP's next request, as a TCP ping-pong's reply), or, when the QP has no such
// connection (not connected over the link, or not to that source), on the request's own.
// Link protocol 4: the QP's own connection is normally this very one — the QP adopts a
// connection its RC peer dialed (the dialer proved the peer's key too) rather than dial a
// second — and a connection a local QP dialed is read here too (serveDialed): both carry
// requests to that QP and answers to its own requests (to the LinkClient they answer). Memory per connection is bounded: one frame being read (its header checked
// before its payload is kept) plus at most REPLY_BUDGET bytes of answers not yet sent.
//
// The common request — a SEND or WRITE from the pair the connection served last, carrying
// the token that pair expects — is parsed, checked, run and answered in one native crossing
// (respondFrame, #runExpected); the pair's state stays here, and anything else (first frame,
// resends, discards, READs, atomics, a frame naming another QP) takes #answer's path.
// Steady state allocates nothing here: requests are run where they lie in the chunk read
// (frames.ts FrameReader), headers parse into one record, answers gather in the
// connection's Outbox (one write per chunk read, not per frame) and recent answers are kept
// in reused slots. An RDMA WRITE that spans chunks is placed as it arrives: once its header
// passed every check respond makes (QP, source, access, key, bounds) and it is the WR to run
// next, each chunk's part goes straight from the socket's chunk into the target memory
// (native place(), which checks the range again each time), and respond then answers it
// without copying. Anything else (and a WRITE failing a check) is gathered whole first.
import { createServer, type Server, type Socket } from 'node:net';
import { adoptAccepted } from '@rdmajs/socket-reads';
import { ABI } from '../../abi.js';
import type { SoftNativeDevice } from '../../native.js';
import {
  answerDataBytes,
  checkRequestHeader,
  copyBytes,
  FLAG_ANSWER_BACK,
  type FramePlacer,
  FrameReader,
  frameReqId,
  headerSize,
  isAnswer,
  LINK_PROGRESS,
  newRequestHeader,
  nextLinkToken,
  PROGRESS_BYTES,
  parseRequestHeader,
  REQ_HEADER,
  RES_HEADER,
  type RequestHeader,
  writeResponseHeader,
} from './frames.js';
import type { Accepted } from './handshake.js';
import {
  AUTH_BYTES,
  couldBePreamble,
  HANDSHAKE_DEADLINE_MS,
  type LinkTarget,
  TargetHandshake,
} from './handshake.js';
import type { LinkClient } from './LinkClient.js';
import { type AnswerSink, Outbox, type SendNow, sendVia } from './Outbox.js';
import { isLoopback, loopbackPeerUid } from './peerUid.js';

/**
 * Unauthenticated connections held at once: a new one drops the oldest (mux's listeners do the
 * same), so silent sockets cannot lock real initiators out. One per QP pair is the norm.
 */
export const MAX_PENDING_LINKS = 64;
/** Connections in all; beyond, a new one is refused unless an unauthenticated one can go. */
export const MAX_LINKS = 4096;
/** Answers waiting in a socket beyond this pause reading until it drains (backpressure). */
const REPLY_BUDGET = 4 << 20;
/**
 * What one read from a connection takes at most: one buffer for every connection of the
 * device (accepted, and dialed ones it reads: serveDialed), so it can be large — a 1 MiB
 * WRITE arrives in a few reads (each a call into JS and a place() crossing), not 16.
 */
const READ_BUFFER = 128 << 10;
/** QP pairs whose order and answers are kept; the least recently used go first. */
const MAX_REMEMBERED = 1 << 16;
/** Answers kept per QP pair for resends: more than the initiator has in flight (16). */
/** Gathered answers this large are written at once, not at the end of the turn. */
const FLUSH_NOW = 256 << 10;
const ANSWERS_PER_PAIR = 32; // a power of two: slots are token & (ANSWERS_PER_PAIR - 1)
/** WRITEs with at least this much payload spanning chunks are placed as they arrive. */
const PLACE_MIN = 4 << 10;
const EMPTY = Buffer.alloc(0);

/**
 * A connection the remote QP dialed, offered to the local QP it is bound to (protocol 4):
 * the QP sends its own requests on it once `provesPeer(its remote's key)` (LinkClient).
 */
export interface AcceptedLink {
  readonly sock: Socket;
  /** the connection's one Outbox: answers and the adopting QP's requests, in order */
  readonly out: Outbox;
  readonly peerMaxPayload: number;
  provesPeer(key: string): boolean;
  /** told as each buffer of `out` is through (set by the adopting LinkClient) */
  written: ((requests: boolean) => void) | undefined;
}

/** A local QP as the link's target sees it (the device finds it by its slot and generation). */
export interface LinkEnd {
  /** A connection its peer dialed authenticated (or the QP connected after it did). */
  accepted(link: AcceptedLink): void;
  /** The connection it sends its own requests on (answers to them are delivered to it). */
  readonly client: LinkClient | undefined;
  /**
   * The connection answers to requests from the QP (srcPid, srcQpn) go back on: this QP's own
   * to that peer (dialed again if it failed), or undefined when it has none to it.
   */
  answerVia(srcPid: number, srcQpn: number): LinkClient | undefined;
}

/** The answer to a WR that ran, and what identifies that WR beyond its token (reused). */
class Answered {
  token = 0; // 0: none (tokens start at 1)
  opcode = 0;
  length = 0;
  remoteAddr = 0;
  rkey = 0;
  outcome = 0;
  status = 0;
  rnrTimer = 0;
  /** an atomic's prior value */
  readonly data = Buffer.alloc(ABI.ATOMIC_BYTES);
  dataBytes = 0;
}

/** Per (target QP incarnation, source QP): the order of its WRs and recent answers. */
interface PairState {
  /** the token the next WR without FLAG_HEAD must carry; 0 before the first */
  expected: number;
  /** answers of WRs run (not READs), by token modulo ANSWERS_PER_PAIR */
  answers: (Answered | undefined)[];
  /**
   * The connection that last ran or began placing a WR of this pair. A WRITE being placed on
   * an older one (the initiator moved to a new connection) stops placing: its late bytes
   * must not land after WRs the new connection ran. Its id (0: none), not the object: a
   * remembered pair must not keep a closed connection alive.
   */
  conn: number;
}

/** A local QP incarnation as a map key (made once per connection). */
function boundKey(t: LinkTarget): string {
  return `${t.slot}:${t.gen}`;
}

/** True when `h` is the WR `a` answered, sent again (a resend repeats it exactly). */
function sameRequest(a: Answered, h: RequestHeader): boolean {
  return (
    a.opcode === h.opcode &&
    a.length === h.length &&
    Object.is(a.remoteAddr, h.remoteAddr) &&
    a.rkey === h.rkey
  );
}

/** The answer slot of `token` in `pair`, naming that WR (its outcome is the caller's to set). */
function remember(
  pair: PairState,
  token: number,
  opcode: number,
  length: number,
  remoteAddr: number,
  rkey: number,
): Answered {
  const slot = token & (ANSWERS_PER_PAIR - 1);
  let a = pair.answers[slot];
  if (a === undefined) {
    a = new Answered();
    pair.answers[slot] = a;
  }
  a.token = token;
  a.opcode = opcode;
  a.length = length;
  a.remoteAddr = remoteAddr;
  a.rkey = rkey;
  return a;
}

/** The request's fields into a respond record (RESPOND_* words); `placed` as RESPOND_PLACED. */
function toRecord(h: RequestHeader, rec: Float64Array, placed: number): void {
  rec[ABI.RESPOND_SLOT] = h.slot;
  rec[ABI.RESPOND_GEN] = h.gen;
  rec[ABI.RESPOND_OPCODE] = h.opcode;
  rec[ABI.RESPOND_IMM] = h.imm;
  rec[ABI.RESPOND_REMOTE_ADDR] = h.remoteAddr;
  rec[ABI.RESPOND_RKEY] = h.rkey;
  rec[ABI.RESPOND_SRC_QPN] = h.srcQpn;
  rec[ABI.RESPOND_SRC_PID] = h.srcPid;
  rec[ABI.RESPOND_PLACED] = placed;
  rec[ABI.RESPOND_SOLICITED] = h.solicited ? 1 : 0;
}

/** One authenticated connection: its reader, its answers, the pair it last served. */
/**
 * One authenticated connection: its reader, its answers, the pair it last served. A class
 * (not an object literal with getters, whose every instance gets a map of its own): the
 * per-frame code reads its fields through monomorphic inline caches.
 */
class Conn implements AnswerSink, AcceptedLink {
  /** names it in PairState.conn (from 1) */
  readonly id: number;
  readonly sock: Socket;
  readonly out: Outbox;
  written: ((requests: boolean) => void) | undefined = undefined;
  readonly peerMaxPayload: number;
  readonly #peer: Accepted | undefined;
  /** where the answers of the frame that stopped the reader were to go (backpressure) */
  stoppedBy: AnswerSink | undefined = undefined;
  readonly bound: LinkTarget;
  reader: FrameReader = undefined as unknown as FrameReader;
  /** bytes of the incomplete frame when its progress was last reported */
  reported = 0;
  pairSlot = -1;
  pairGen = -1;
  pairPid = -1;
  pairQpn = -1;
  pairKey = '';
  pair: PairState | undefined = undefined;
  /** in the listener's list of connections to flush */
  dirty = false;
  /** reading stopped by #afterChunk (answers back up) */
  paused = false;
  /** the frame in progress is an RDMA WRITE being placed as it arrives (FramePlacer) */
  placing = false;
  /** a piece of it could not be placed (a check failed): it is not answered as run */
  placeFailed = false;
  placePair: PairState | undefined = undefined;
  /** the placed WRITE's fields (RESPOND_* words; RESPOND_PLACED its length), per connection */
  readonly placeRecord = new Float64Array(ABI.RESPOND_WORDS);
  readonly placeHeader: RequestHeader = newRequestHeader();

  constructor(
    id: number,
    sock: Socket,
    bound: LinkTarget,
    peer: Accepted | undefined,
    send: SendNow,
  ) {
    this.id = id;
    this.sock = sock;
    this.bound = bound;
    this.#peer = peer;
    this.peerMaxPayload = peer?.peerMaxPayload ?? 0;
    this.out = new Outbox(sock, (requests) => this.written?.(requests), send);
  }

  get closed(): boolean {
    return this.sock.destroyed;
  }

  get backlog(): number {
    return this.sock.writableLength + this.out.used;
  }

  provesPeer(key: string): boolean {
    return this.#peer?.provesPeer(key) === true;
  }

  flushOut(): void {
    this.out.flush();
  }

  whenWritable(fn: () => void): void {
    this.sock.once('drain', fn);
  }
}

export class LinkServer {
  readonly #server: Server;
  readonly #native: SoftNativeDevice;
  /**
   * delivers the wake-ups a read's frames owe this device's CQs (SoftDeviceDriver); given
   * how many respondFrame took already (≥ 0), without asking the addon again
   */
  readonly #wake: (taken?: number) => void;
  /**
   * The read being run (#push): a frame that ends it is the read's last, and respondFrame
   * takes the read's wake-ups with it (FRAME_IN_WAKE). #taken: how many it took, for
   * #afterChunk (−1: none taken, wakeOwed decides).
   */
  #chunkBuf: Buffer | undefined;
  #chunkEnd = -1;
  #taken = -1;
  /** how connections' Outboxes write when nothing is queued in their socket */
  readonly #send: SendNow;
  readonly #secret: Buffer;
  readonly #maxPayload: number;
  readonly #ends: (slot: number, gen: number) => LinkEnd | undefined;
  readonly #sockets = new Set<Socket>();
  /** Not yet authenticated, oldest first (insertion order). */
  readonly #pending = new Set<Socket>();
  /** the respond record, one per listener (requests are answered one at a time) */
  readonly #record = new Float64Array(ABI.RESPOND_WORDS);
  /** respondFrame's record, one per listener as #record (the common request: #runExpected) */
  readonly #frameRecord = new Float64Array(ABI.FRAME_WORDS);
  /**
   * Every connection reads into this one buffer (adoptAccepted): each read is run before
   * the next is made, and a reader keeps a copy of what it holds past the read (its carry;
   * the rest of a read when answers back up: FrameReader's `reusedChunks`).
   */
  readonly #readBuffer = Buffer.allocUnsafe(READ_BUFFER);

  /** The buffer every connection it reads reads into (a dialed one too: DialOptions). */
  get readBuffer(): Buffer {
    return this.#readBuffer;
  }
  /** the header being answered, parsed into (one per listener, as the record) */
  readonly #h = newRequestHeader();
  /** connections with answers gathered, written at the next EV_LINK_FLUSH */
  readonly #dirty: AnswerSink[] = [];
  #flushArmed = false;
  #connIds = 0;
  /**
   * Authenticated connections bound to each local QP (slot, gen), oldest first. Answers to
   * that QP's requests ride on the newest (its peer dials again after a failure): only its
   * loss loses them, not a stale or extra one closing.
   */
  readonly #bound = new Map<string, Conn[]>();
  // READs' answers are not kept: running one again is harmless, and their data would pin
  // memory. Kept across connections (a window is re-sent over a new one after a failure);
  // only connections bound to a QP reach its entries.
  readonly #pairs = new Map<string, PairState>();

  private constructor(
    server: Server,
    native: SoftNativeDevice,
    secret: Buffer,
    maxPayload: number,
    ends: (slot: number, gen: number) => LinkEnd | undefined,
    wake: (taken?: number) => void,
  ) {
    this.#wake = wake;
    this.#server = server;
    this.#native = native;
    this.#send = sendVia(native);
    this.#secret = secret;
    this.#maxPayload = maxPayload;
    this.#ends = ends;
  }

  static async listen(
    native: SoftNativeDevice,
    host: string,
    port: number,
    secret: Buffer,
    maxPayload: number,
    ends: (slot: number, gen: number) => LinkEnd | undefined,
    wake: (taken?: number) => void,
  ): Promise<{ server: LinkServer; port: number }> {
    // Paused: adoptAccepted makes each connection read into the listener's buffer. Node's
    // own reads would allocate one per request and per 64 KiB of a large WRITE (fresh pages
    // the kernel faults in and zeroes), plus a 'data' event's stream machinery.
    const server = createServer({ pauseOnConnect: true });
    const link = new LinkServer(server, native, secret, maxPayload, ends, wake);
    native.onLinkFlush(link.#flush);
    server.on('connection', (s) => link.#serve(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', () => undefined); // e.g. EMFILE on accept: keep serving the others
    server.unref();
    const a = server.address();
    return { server: link, port: typeof a === 'object' && a ? a.port : port };
  }

  /** Connections open now (authenticated or not). */
  get connections(): number {
    return this.#sockets.size;
  }

  #serve(raw: Socket): void {
    // On one host, only this user's processes may even try to authenticate.
    if (isLoopback(raw.remoteAddress) && loopbackPeerUid(raw) !== process.getuid?.()) {
      raw.destroy();
      return;
    }
    const buf = this.#readBuffer;
    let onRead: (n: number) => boolean = () => false;
    const sock = adoptAccepted(raw, { buffer: buf, callback: (n) => onRead(n) });
    if (!sock) return;
    if (!this.#admit(sock)) return;
    sock.setNoDelay(true);
    sock.unref();
    sock.on('error', () => sock.destroy());
    let conn: Conn | undefined;
    sock.on('close', () => {
      this.#sockets.delete(sock);
      this.#pending.delete(sock);
      // Answers to the bound QP's requests may have been on their way on it.
      if (conn && this.#unbind(conn))
        this.#ends(conn.bound.slot, conn.bound.gen)?.client?.answersLost();
    });
    const handshake = new TargetHandshake(this.#secret);
    const deadline = setTimeout(() => sock.destroy(), HANDSHAKE_DEADLINE_MS);
    deadline.unref();
    sock.write(handshake.hello(this.#maxPayload));
    let pre: Buffer | undefined = Buffer.alloc(0);
    const resume = () => {
      const c = conn as Conn;
      let ok = true;
      try {
        ok = c.reader.resume();
      } catch {
        ok = false;
      }
      this.#afterChunk(c, ok, resume);
    };
    // Each read's bytes are buf[0, n); false stops reading (answers back up).
    onRead = (n: number): boolean => {
      if (conn) {
        const ok = this.#push(conn, buf, 0, n);
        this.#afterChunk(conn, ok, resume);
        return !conn.reader.stopped && !sock.destroyed;
      }
      if (!pre) return false;
      // Nothing is acted on before the peer proved the secret.
      pre = Buffer.concat([pre, buf.subarray(0, n)]);
      if (!couldBePreamble(pre)) {
        sock.destroy(); // not this protocol: no need to wait for the deadline
        return false;
      }
      if (pre.length < AUTH_BYTES) return true;
      const accepted = handshake.verify(pre.subarray(0, AUTH_BYTES));
      if (!accepted) {
        sock.destroy();
        return false;
      }
      clearTimeout(deadline);
      this.#pending.delete(sock);
      sock.write(accepted.welcome);
      const c = this.#open(sock, accepted.target, accepted);
      conn = c;
      this.#bind(c);
      // Its dialer may carry the bound QP's own requests too (protocol 4).
      this.#ends(c.bound.slot, c.bound.gen)?.accepted(c);
      const rest = pre.subarray(AUTH_BYTES);
      pre = undefined;
      if (rest.length > 0) {
        let ok = true;
        try {
          ok = c.reader.push(rest);
        } catch {
          ok = false;
        }
        this.#afterChunk(c, ok, resume);
        return !c.reader.stopped && !sock.destroyed;
      }
      return true;
    };
  }

  /** The state of an authenticated connection bound to local QP `bound`. */
  #open(sock: Socket, bound: LinkTarget, peer: Accepted | undefined): Conn {
    const max = this.#maxPayload;
    const c = new Conn(++this.#connIds, sock, bound, peer, this.#send);
    const placer: FramePlacer = {
      begin: (b, o, len) => !isAnswer(b, o) && this.#beginPlace(c, b, o, len),
      piece: (b, o, n, at) => this.#place(c, b, o, n, at),
    };
    c.reader = new FrameReader(
      { minHeader: RES_HEADER, sizeOf: headerSize },
      (b, o) => (isAnswer(b, o) ? this.#checkAnswer(c, b, o) : checkRequestHeader(b, o, max)),
      (b, o, n) => (isAnswer(b, o) ? this.#deliverAnswer(c, b, o, n) : this.#onFrame(c, b, o, n)),
      placer,
      true,
    );
    return c;
  }

  /**
   * Reads the authenticated connection `sock` that local QP `bound` dialed (its LinkClient
   * `client`): requests from the remote QP to it, answers to its own (protocol 4). Returns
   * what takes each read (`buf[start, end)`; false: stop reading, answers back up).
   */
  serveDialed(
    sock: Socket,
    bound: LinkTarget,
  ): (buf: Buffer, start: number, end: number) => boolean {
    const resume = () => {
      let ok = true;
      try {
        ok = c.reader.resume();
      } catch {
        ok = false;
      }
      this.#afterChunk(c, ok, resume);
    };
    // Answers go into the client's Outbox (answerVia): this connection's own stays empty.
    const c = this.#open(sock, bound, undefined);
    return (buf, start, end) => {
      const ok = this.#push(c, buf, start, end);
      this.#afterChunk(c, ok, resume);
      return !c.reader.stopped && !sock.destroyed;
    };
  }

  /** Local QP `slot`, `gen` connected: the newest connection its peer dialed is offered to it. */
  offer(slot: number, gen: number, end: LinkEnd): void {
    const list = this.#bound.get(boundKey({ slot, gen }));
    const c = list?.[list.length - 1];
    if (c !== undefined && !c.sock.destroyed) end.accepted(c);
  }

  #bind(c: Conn): void {
    const key = boundKey(c.bound);
    const list = this.#bound.get(key);
    if (list) list.push(c);
    else this.#bound.set(key, [c]);
  }

  /** Forgets closed `c`; true when it was the newest connection bound to its QP. */
  #unbind(c: Conn): boolean {
    const key = boundKey(c.bound);
    const list = this.#bound.get(key);
    if (!list) return false;
    const i = list.indexOf(c);
    if (i < 0) return false;
    const newest = i === list.length - 1;
    list.splice(i, 1);
    if (list.length === 0) this.#bound.delete(key);
    return newest;
  }

  /** Counts `sock` in, dropping the oldest unauthenticated one when full; false: refused. */
  #admit(sock: Socket): boolean {
    const full = this.#sockets.size >= MAX_LINKS;
    if (this.#pending.size >= MAX_PENDING_LINKS || (full && this.#pending.size > 0)) {
      const oldest = this.#pending.values().next().value as Socket;
      this.#pending.delete(oldest);
      this.#sockets.delete(oldest);
      oldest.destroy();
    } else if (full) {
      sock.destroy(); // every slot holds an authenticated peer
      return false;
    }
    this.#sockets.add(sock);
    this.#pending.add(sock);
    return true;
  }

  /** Runs the frames of a read, `buf[start, end)`; false: the connection is to be dropped. */
  #push(c: Conn, buf: Buffer, start: number, end: number): boolean {
    this.#chunkBuf = buf;
    this.#chunkEnd = end;
    try {
      return c.reader.push(buf, start, end);
    } catch {
      return false;
    } finally {
      this.#chunkBuf = undefined;
    }
  }

  /** After a chunk's frames ran: progress for a large one arriving, answers out, backpressure. */
  #afterChunk(c: Conn, ok: boolean, resume: () => void): void {
    // The wake-ups this chunk's frames owe this device's CQs, as one batch, in this callback
    // (not a second one after the loop's I/O). Before the checks below: a handler may close.
    const taken = this.#taken;
    this.#taken = -1;
    this.#wake(taken);
    const sock = c.sock;
    if (!ok) {
      sock.destroy();
      return;
    }
    if (sock.destroyed) return;
    const partial = c.reader.partial;
    if (partial && isAnswer(partial, 0)) {
      // Part of a large answer (a READ's data) to the bound QP's request.
      this.#ends(c.bound.slot, c.bound.gen)?.client?.answerArriving(frameReqId(partial, 0));
    } else if (partial && c.reader.buffered - c.reported >= PROGRESS_BYTES) {
      // A large request keeps the initiator's ACK timer alive while it arrives (reported
      // where its answer will go: the report comes before the answer).
      c.reported = c.reader.buffered;
      const sink = this.#sinkFor(c, partial, 0);
      const b = sink.out.reserve(RES_HEADER);
      writeResponseHeader(b, sink.out.at, frameReqId(partial, 0), LINK_PROGRESS, 0, 0, 0);
      sink.out.commit(RES_HEADER);
      this.#flushSoon(sink);
    }
    if (c.reader.stopped) {
      // Answers are produced only while the socket keeps up: a READ's reply is made when it
      // can be sent, so a burst of READ requests cannot claim unbounded memory.
      c.paused = true;
      sock.pause();
      (c.stoppedBy ?? c).whenWritable(resume);
    } else if (c.paused) {
      // Our own flag: the stream's isPaused() is a megamorphic load on every read.
      c.paused = false;
      sock.resume();
    }
  }

  /**
   * Where answers to the request whose header is at `b[o..]` go: the bound QP's own
   * connection to the request's source QP, or this one (see the file's comment).
   */
  #sinkFor(c: Conn, b: Buffer, o: number): AnswerSink {
    if (((b[o + 9] as number) & FLAG_ANSWER_BACK) === 0) return c;
    const slot = b.readUInt32LE(o + 32);
    const gen = b.readUInt32LE(o + 36);
    if (slot !== c.bound.slot || gen !== c.bound.gen) return c; // refused by #answer
    const via = this.#ends(slot, gen)?.answerVia(b.readUInt32LE(o + 44), b.readUInt32LE(o + 40));
    return via ?? c;
  }

  /** An answer's header for the bound QP's request: its frame length, or -1 (dropped). */
  #checkAnswer(c: Conn, b: Buffer, o: number): number {
    const client = this.#ends(c.bound.slot, c.bound.gen)?.client;
    return client ? client.checkAnswer(b, o) : -1;
  }

  #deliverAnswer(c: Conn, b: Buffer, o: number, len: number): boolean {
    this.#ends(c.bound.slot, c.bound.gen)?.client?.deliverAnswer(b, o, len);
    return !c.sock.destroyed;
  }

  /**
   * Answers go out after this turn's I/O and the wake-ups it caused (linkFlushSoon): an
   * application woken by a request it got sends before its answer is written, and a turn's
   * answers leave in one write per connection. Many bytes of them go at once.
   */
  #flushSoon(c: AnswerSink): void {
    if (c.out.used === 0) return;
    if (c.out.used >= FLUSH_NOW) {
      c.flushOut();
      return;
    }
    if (!c.dirty) {
      c.dirty = true;
      this.#dirty.push(c);
    }
    if (!this.#flushArmed) {
      this.#flushArmed = true;
      this.#native.linkFlushSoon();
    }
  }

  /**
   * A connection's answers left with a request of its QP (LinkClient.endBatch): when no
   * connection has any left to write, the flush is called off — no call into JS for nothing
   * after the wake-ups (a ping-pong's answer always leaves that way).
   */
  readonly settle = (calledOff = false): void => {
    if (!this.#flushArmed) return;
    const list = this.#dirty;
    for (let i = 0; i < list.length; i++) {
      const c = list[i] as AnswerSink;
      if (c.out.used > 0 && !c.closed) return;
    }
    // Emptied by pops (inlined), not `length = 0` (a runtime call per round trip).
    while (list.length > 0) (list.pop() as AnswerSink).dirty = false;
    this.#flushArmed = false;
    // Called off natively by the write that took the last bytes, or here in a crossing.
    if (!calledOff) this.#native.linkFlushSoon(false);
  };

  /**
   * True when `sink`'s gathered bytes are the last the flush is owed for: its write may call
   * the flush off itself (LinkClient.endBatch), settle() then makes no crossing for it.
   */
  readonly lastOwed = (sink: AnswerSink): boolean => {
    if (!this.#flushArmed) return false;
    const list = this.#dirty;
    for (let i = 0; i < list.length; i++) {
      const c = list[i] as AnswerSink;
      if (c !== sink && c.out.used > 0 && !c.closed) return false;
    }
    return true;
  };

  /** Writes what every connection gathered (called by the device: linkFlushSoon). */
  readonly #flush = (): void => {
    this.#flushArmed = false;
    const list = this.#dirty;
    for (let i = 0; i < list.length; i++) {
      const c = list[i] as AnswerSink;
      c.dirty = false;
      if (!c.closed) c.flushOut();
    }
    list.length = 0;
  };

  /** Runs one whole request frame at `b[o..]`; false to stop reading (answers back up). */
  #onFrame(c: Conn, b: Buffer, o: number, len: number): boolean {
    if (c.sock.destroyed) return false;
    const sink = this.#sinkFor(c, b, o);
    // The bound QP's connection back is still authenticating: its answers wait for it.
    if (sink !== c && !(sink as LinkClient).open) {
      c.stoppedBy = sink;
      return false;
    }
    if (sink.backlog >= REPLY_BUDGET) {
      c.stoppedBy = sink;
      return false;
    }
    c.stoppedBy = undefined;
    c.reported = 0;
    const placed = c.placing;
    c.placing = false;
    c.placePair = undefined;
    // respond() arms the flush itself (no linkFlushSoon crossing for its answer). The common
    // request first: #answer, cold then, stays out of the per-frame path.
    if (
      (!placed && this.#runExpected(c, sink, b, o, len)) ||
      this.#answer(c, sink, b, o, len, placed)
    )
      this.#flushArmed = true;
    this.#flushSoon(sink);
    return !c.sock.destroyed;
  }

  /**
   * The header of a frame spanning chunks: true to place its payload as it arrives. Only an
   * RDMA WRITE that would run now (not a resend answered from memory, not one to discard)
   * and that passes respond's checks for its whole range; else it is gathered and answered
   * as before, whatever the reason.
   */
  #beginPlace(c: Conn, b: Buffer, o: number, len: number): boolean {
    if (len - REQ_HEADER < PLACE_MIN || b[o + 8] !== ABI.OP_RDMA_WRITE) return false;
    const h = c.placeHeader;
    parseRequestHeader(b, o, len, h); // checked by the reader before it began the frame
    if (h.slot !== c.bound.slot || h.gen !== c.bound.gen) return false;
    const pair = this.#pairOf(c, h);
    const known = pair.answers[h.token & (ANSWERS_PER_PAIR - 1)];
    if (known !== undefined && known.token === h.token) return false;
    if (!h.head && h.token !== pair.expected) return false;
    const rec = c.placeRecord;
    toRecord(h, rec, h.length);
    if (!this.#native.place(rec, EMPTY, 0, 0, 0)) return false;
    pair.conn = c.id;
    c.placing = true;
    c.placeFailed = false;
    c.placePair = pair;
    return true;
  }

  /** A piece of the WRITE being placed: into the target memory, or the WRITE has failed. */
  #place(c: Conn, b: Buffer, o: number, n: number, at: number): void {
    if (c.placeFailed) return;
    if (c.placePair?.conn !== c.id || !this.#native.place(c.placeRecord, b, o, n, at)) {
      c.placeFailed = true;
    }
  }

  /** The pair state of `h`'s source QP at the bound QP (the last one kept at hand). */
  #pairOf(c: Conn, h: RequestHeader): PairState {
    if (
      c.pair !== undefined &&
      c.pairSlot === h.slot &&
      c.pairGen === h.gen &&
      c.pairPid === h.srcPid &&
      c.pairQpn === h.srcQpn &&
      this.#pairs.get(c.pairKey) === c.pair
    )
      return c.pair;
    const key = `${h.slot}:${h.gen}:${h.srcPid}:${h.srcQpn}`;
    c.pair = this.#pair(key);
    c.pairKey = key;
    c.pairSlot = h.slot;
    c.pairGen = h.gen;
    c.pairPid = h.srcPid;
    c.pairQpn = h.srcQpn;
    return c.pair;
  }

  /**
   * Answers the frame at `b[o..]`; `placed`: a WRITE placed as it arrived (header only).
   * True when respond() ran it (and so armed the link's flush).
   */
  #answer(c: Conn, sink: AnswerSink, b: Buffer, o: number, len: number, placed: boolean): boolean {
    const h = this.#h;
    // Checked by the reader before it handed the frame over: parsed only. A placed WRITE's
    // frame is its header alone (the payload went into place), with its whole length.
    parseRequestHeader(b, o, len, h);
    const sock = c.sock;
    if (h.slot !== c.bound.slot || h.gen !== c.bound.gen) {
      sock.destroy(); // a QP this connection has not proven the key of
      return false;
    }
    const out = sink.out;
    const isRead = h.opcode === ABI.OP_RDMA_READ;
    const pair = this.#pairOf(c, h);
    if (placed && pair.conn !== c.id) {
      sock.destroy(); // the initiator went on over another connection: this one is stale
      return false;
    }
    pair.conn = c.id;
    const slot = h.token & (ANSWERS_PER_PAIR - 1);
    const known = pair.answers[slot];
    if (known !== undefined && known.token === h.token) {
      if (!sameRequest(known, h)) {
        // Not a resend: the initiator's tokens went wrong, or it is not a faithful peer.
        sock.destroy();
        return false;
      }
      // A resend of a WR already run: the same answer again, not a second execution.
      const ob = out.reserve(RES_HEADER + known.dataBytes);
      const at = out.at;
      writeResponseHeader(
        ob,
        at,
        h.reqId,
        known.outcome,
        known.status,
        known.rnrTimer,
        known.dataBytes,
      );
      copyBytes(known.data, 0, ob, at + RES_HEADER, known.dataBytes);
      out.commit(RES_HEADER + known.dataBytes);
      return false;
    }
    if (!h.head && h.token !== pair.expected) {
      // Behind a WR that did not run (RNR, transport) or that never came: running it now
      // would break the QP's order. The initiator sends it again after that one.
      const ob = out.reserve(RES_HEADER);
      writeResponseHeader(ob, out.at, h.reqId, ABI.LINK_DISCARDED, 0, 0, 0);
      out.commit(RES_HEADER);
      return false;
    }
    const dataBytes = answerDataBytes(h.opcode, h.length);
    const rec = this.#record;
    toRecord(h, rec, placed ? h.length : 0);
    let outcome: number;
    let ob: Buffer;
    let at: number;
    if (placed) {
      // Its bytes are in place: respond checks it all again and copies nothing.
      outcome = this.#native.respond(rec, EMPTY, 0, 0) | 0;
      if (c.placeFailed && outcome === ABI.LINK_DONE && rec[ABI.RESPOND_STATUS] === 0) {
        // A piece missed its place though the WRITE passes now: not run, sent again.
        outcome = ABI.LINK_TRANSPORT;
      }
    } else if (isRead) {
      // The data goes straight into the answer.
      ob = out.reserve(RES_HEADER + h.length);
      at = out.at;
      outcome = this.#native.respond(rec, ob, at + RES_HEADER, h.length) | 0;
    } else {
      outcome = this.#native.respond(rec, b, o + REQ_HEADER, h.length) | 0;
    }
    // Small integers (| 0): kept as such, not boxed doubles from the record.
    const status = (rec[ABI.RESPOND_STATUS] as number) | 0;
    const rnrTimer = (rec[ABI.RESPOND_RNR_TIMER] as number) | 0;
    const done = outcome === ABI.LINK_DONE;
    const ok = done && status === 0;
    // READ data, or an atomic's prior value (written over its operands by respond).
    const n = dataBytes > 0 && ok ? dataBytes : 0;
    if (isRead) {
      ob = out.reserve(0); // the same buffer: reserved above
      at = out.at;
    } else {
      ob = out.reserve(RES_HEADER + n);
      at = out.at;
      copyBytes(b, o + REQ_HEADER, ob, at + RES_HEADER, n);
    }
    writeResponseHeader(ob, at, h.reqId, outcome, status, rnrTimer, n);
    out.commit(RES_HEADER + n);
    // Only a WR that ran is remembered (atomics with their result: never run twice); RNR
    // and transport answers are run again on resend. After anything but success the next
    // one must come as the head again (resent, or after the initiator's QP was reset):
    // nothing behind a failure runs out of order.
    pair.expected = ok ? nextLinkToken(h.token) : 0;
    if (done && !isRead) {
      const a = remember(pair, h.token, h.opcode, h.length, h.remoteAddr, h.rkey);
      a.outcome = outcome;
      a.status = status;
      a.rnrTimer = rnrTimer;
      a.dataBytes = n;
      copyBytes(b, o + REQ_HEADER, a.data, 0, n);
    }
    return true;
  }

  /**
   * The common request in one native crossing (respondFrame): a SEND or WRITE from the source
   * QP of the pair this connection last served, carrying the token that pair expects next —
   * parsed, checked against all that, run and answered natively. True when it ran; false with
   * nothing done (anything else: #answer's checks decide, the peer's bytes checked natively
   * either way). The pair's state changes as #answer changes it for such a frame.
   */
  #runExpected(c: Conn, sink: AnswerSink, b: Buffer, o: number, len: number): boolean {
    const pair = c.pair;
    if (pair === undefined) return false;
    const token = pair.expected;
    if (token === 0 || c.pairSlot !== c.bound.slot || c.pairGen !== c.bound.gen) return false;
    // That token answered already (the initiator's tokens came round): #answer sorts it out.
    const known = pair.answers[token & (ANSWERS_PER_PAIR - 1)];
    if (known !== undefined && known.token === token) return false;
    if (this.#pairs.get(c.pairKey) !== pair) return false; // forgotten: #pairOf starts afresh
    const out = sink.out;
    const ob = out.reserve(RES_HEADER);
    const rec = this.#frameRecord;
    rec[ABI.FRAME_IN_OFFSET] = o;
    rec[ABI.FRAME_IN_LENGTH] = len;
    rec[ABI.FRAME_IN_OUT_AT] = out.at;
    rec[ABI.FRAME_IN_SLOT] = c.pairSlot;
    rec[ABI.FRAME_IN_GEN] = c.pairGen;
    rec[ABI.FRAME_IN_SRC_PID] = c.pairPid;
    rec[ABI.FRAME_IN_SRC_QPN] = c.pairQpn;
    rec[ABI.FRAME_IN_TOKEN] = token;
    // Nothing after the read's last frame can owe a wake-up before #afterChunk delivers them.
    rec[ABI.FRAME_IN_WAKE] = b === this.#chunkBuf && o + len === this.#chunkEnd ? 1 : 0;
    rec[ABI.FRAME_READY] = -1; // a call that returns early leaves no earlier call's count
    const outcome = this.#native.respondFrame(rec, b, ob) | 0;
    this.#taken = rec[ABI.FRAME_READY] as number;
    if (outcome === ABI.FRAME_NOT_RUN) return false;
    out.commit(RES_HEADER);
    pair.conn = c.id;
    const status = (rec[ABI.FRAME_STATUS] as number) | 0;
    const done = outcome === ABI.LINK_DONE;
    // As #answer: only a success lets the next token follow; only a WR that ran is kept.
    pair.expected = done && status === 0 ? nextLinkToken(token) : 0;
    if (done) {
      const a = remember(
        pair,
        token,
        rec[ABI.FRAME_OPCODE] as number,
        rec[ABI.FRAME_LENGTH] as number,
        rec[ABI.FRAME_REMOTE_ADDR] as number,
        rec[ABI.FRAME_RKEY] as number,
      );
      a.outcome = outcome;
      a.status = status;
      a.rnrTimer = (rec[ABI.FRAME_RNR_TIMER] as number) | 0;
      a.dataBytes = 0;
    }
    return true;
  }

  #pair(key: string): PairState {
    let p = this.#pairs.get(key);
    if (p) {
      this.#pairs.delete(key); // re-inserted last: the map's order is the eviction order
    } else {
      p = { expected: 0, answers: new Array(ANSWERS_PER_PAIR), conn: 0 };
    }
    this.#pairs.set(key, p);
    if (this.#pairs.size > MAX_REMEMBERED) {
      this.#pairs.delete(this.#pairs.keys().next().value as string);
    }
    return p;
  }

  close(): void {
    for (const s of this.#sockets) s.destroy();
    this.#server.close();
  }
}

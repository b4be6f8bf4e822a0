// The target side of the soft TCP link: authenticates each connection for the one QP it
// proved the key of (handshake.ts), then runs each request to that QP with the device's
// responder (the same logic as the shared-memory path) and
// answers it. Memory per connection is bounded: one frame being read (its header checked
// before its payload is kept) plus at most REPLY_BUDGET bytes of answers not yet sent.
import { createServer, type Server, type Socket } from 'node:net';
import { ABI } from '../../abi.js';
import type { SoftNativeDevice } from '../../native.js';
import {
  answerDataBytes,
  FrameReader,
  PROGRESS_BYTES,
  REQ_HEADER,
  type RequestHeader,
  readRequestHeader,
  writeProgress,
  writeResponse,
} from './frames.js';
import {
  AUTH_BYTES,
  couldBePreamble,
  HANDSHAKE_DEADLINE_MS,
  type LinkTarget,
  TargetHandshake,
} from './handshake.js';
import { isLoopback, loopbackPeerUid } from './peerUid.js';

/** Answers waiting in a socket beyond this pause reading until it drains (backpressure). */
const REPLY_BUDGET = 4 << 20;
/** QP pairs whose order and answers are kept; the least recently used go first. */
const MAX_REMEMBERED = 1 << 16;
/** Answers kept per QP pair for resends: more than the initiator has in flight (16). */
const ANSWERS_PER_PAIR = 32;

/** The answer to a WR that ran, and what identifies that WR beyond its token. */
interface Answered {
  answer: Buffer;
  opcode: number;
  length: number;
  remoteAddr: number;
  rkey: number;
}

/** Per (target QP incarnation, source QP): the order of its WRs and recent answers. */
interface PairState {
  /** the token the next WR without FLAG_HEAD must carry; 0 before the first */
  expected: number;
  /** answers of WRs run (not READs), to answer a resend without running it twice */
  answers: Map<number, Answered>;
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

export class LinkServer {
  readonly #server: Server;
  readonly #native: SoftNativeDevice;
  readonly #secret: Buffer;
  readonly #maxPayload: number;
  readonly #sockets = new Set<Socket>();
  /** the respond record, one per listener (requests are answered one at a time) */
  readonly #record = new Float64Array(ABI.RESPOND_WORDS);
  // READs' answers are not kept: running one again is harmless, and their data would pin
  // memory. Kept across connections (a window is re-sent over a new one after a failure);
  // only connections bound to a QP reach its entries.
  readonly #pairs = new Map<string, PairState>();

  private constructor(
    server: Server,
    native: SoftNativeDevice,
    secret: Buffer,
    maxPayload: number,
  ) {
    this.#server = server;
    this.#native = native;
    this.#secret = secret;
    this.#maxPayload = maxPayload;
  }

  static async listen(
    native: SoftNativeDevice,
    host: string,
    port: number,
    secret: Buffer,
    maxPayload: number,
  ): Promise<{ server: LinkServer; port: number }> {
    const server = createServer();
    const link = new LinkServer(server, native, secret, maxPayload);
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

  #serve(sock: Socket): void {
    // On one host, only this user's processes may even try to authenticate.
    if (isLoopback(sock.remoteAddress) && loopbackPeerUid(sock) !== process.getuid?.()) {
      sock.destroy();
      return;
    }
    sock.setNoDelay(true);
    sock.unref();
    this.#sockets.add(sock);
    sock.on('error', () => sock.destroy());
    sock.on('close', () => this.#sockets.delete(sock));
    const handshake = new TargetHandshake(this.#secret);
    const deadline = setTimeout(() => sock.destroy(), HANDSHAKE_DEADLINE_MS);
    deadline.unref();
    sock.write(handshake.hello(this.#maxPayload));
    let pre: Buffer | undefined = Buffer.alloc(0);
    const reader = new FrameReader(
      REQ_HEADER,
      (h) => readRequestHeader(h, this.#maxPayload)?.len ?? -1,
    );
    const queued: Buffer[] = [];
    /** the one QP incarnation this connection proved the key of */
    let bound: LinkTarget | undefined;
    const pump = () => {
      // Answers are produced only while the socket keeps up: a READ's reply is allocated
      // when it can be sent, so a burst of READ requests cannot claim unbounded memory.
      while (queued.length > 0 && sock.writableLength < REPLY_BUDGET && !sock.destroyed) {
        this.#answer(sock, queued.shift() as Buffer, bound as LinkTarget);
      }
      if (queued.length > 0 && !sock.destroyed) {
        sock.pause();
        sock.once('drain', pump);
      } else sock.resume();
    };
    /** bytes of the incomplete frame when its progress was last reported */
    let reported = 0;
    const frames = (chunk: Buffer) => {
      let ok = true;
      try {
        ok = reader.push(chunk, (f) => {
          queued.push(f);
          reported = 0;
        });
      } catch {
        ok = false;
      }
      if (!ok) {
        sock.destroy();
        return;
      }
      // A large request keeps the initiator's ACK timer alive while it arrives.
      const partial = reader.partialHeader;
      if (partial && reader.buffered - reported >= PROGRESS_BYTES) {
        reported = reader.buffered;
        sock.write(writeProgress(partial.readUInt32LE(4)));
      }
      pump();
    };
    sock.on('data', (chunk: Buffer) => {
      if (!pre) return frames(chunk);
      // Nothing is acted on before the peer proved the secret.
      pre = Buffer.concat([pre, chunk]);
      if (!couldBePreamble(pre)) {
        sock.destroy(); // not this protocol: no need to wait for the deadline
        return;
      }
      if (pre.length < AUTH_BYTES) return;
      const accepted = handshake.verify(pre.subarray(0, AUTH_BYTES));
      if (!accepted) {
        sock.destroy();
        return;
      }
      clearTimeout(deadline);
      bound = accepted.target;
      sock.write(accepted.welcome);
      const rest = pre.subarray(AUTH_BYTES);
      pre = undefined;
      if (rest.length > 0) frames(rest);
    });
  }

  #answer(sock: Socket, f: Buffer, bound: LinkTarget): void {
    const h = readRequestHeader(f, this.#maxPayload) as RequestHeader; // checked by the reader
    if (h.slot !== bound.slot || h.gen !== bound.gen) {
      sock.destroy(); // a QP this connection has not proven the key of
      return;
    }
    const isRead = h.opcode === ABI.OP_RDMA_READ;
    const dataBytes = answerDataBytes(h.opcode, h.length);
    const pair = this.#pair(`${h.slot}:${h.gen}:${h.srcPid}:${h.srcQpn}`);
    const known = pair.answers.get(h.token);
    if (known) {
      if (!sameRequest(known, h)) {
        // Not a resend: the initiator's tokens went wrong, or it is not a faithful peer.
        sock.destroy();
        return;
      }
      // A resend of a WR already run: the same answer again, not a second execution.
      const again = Buffer.from(known.answer);
      again.writeUInt32LE(h.reqId, 4);
      sock.write(again);
      return;
    }
    if (!h.head && h.token !== pair.expected) {
      // Behind a WR that did not run (RNR, transport) or that never came: running it now
      // would break the QP's order. The initiator sends it again after that one.
      sock.write(writeResponse(h.reqId, ABI.LINK_DISCARDED, 0, 0, undefined));
      return;
    }
    const payload = isRead ? Buffer.allocUnsafe(h.length) : f.subarray(REQ_HEADER);
    const rec = this.#record;
    rec[ABI.RESPOND_SLOT] = h.slot;
    rec[ABI.RESPOND_GEN] = h.gen;
    rec[ABI.RESPOND_OPCODE] = h.opcode;
    rec[ABI.RESPOND_IMM] = h.imm;
    rec[ABI.RESPOND_REMOTE_ADDR] = h.remoteAddr;
    rec[ABI.RESPOND_RKEY] = h.rkey;
    rec[ABI.RESPOND_SRC_QPN] = h.srcQpn;
    rec[ABI.RESPOND_SRC_PID] = h.srcPid;
    const outcome = this.#native.respond(rec, payload);
    const status = rec[ABI.RESPOND_STATUS] as number;
    const done = outcome === ABI.LINK_DONE;
    const ok = done && status === 0;
    // READ data, or an atomic's prior value (written over its operands by respond).
    const data = dataBytes > 0 && ok ? payload.subarray(0, dataBytes) : undefined;
    const answer = writeResponse(
      h.reqId,
      outcome,
      status,
      rec[ABI.RESPOND_RNR_TIMER] as number,
      data,
    );
    // Only a WR that ran is remembered (atomics with their result: never run twice); RNR
    // and transport answers are run again on resend. After anything but success the next
    // one must come as the head again (resent, or after the initiator's QP was reset):
    // nothing behind a failure runs out of order.
    pair.expected = ok ? (h.token + 1) >>> 0 : 0;
    if (done && !isRead) {
      pair.answers.set(h.token, {
        answer,
        opcode: h.opcode,
        length: h.length,
        remoteAddr: h.remoteAddr,
        rkey: h.rkey,
      });
      if (pair.answers.size > ANSWERS_PER_PAIR) {
        pair.answers.delete(pair.answers.keys().next().value as number);
      }
    }
    sock.write(answer);
  }

  #pair(key: string): PairState {
    let p = this.#pairs.get(key);
    if (p) {
      this.#pairs.delete(key); // re-inserted last: the map's order is the eviction order
    } else {
      p = { expected: 0, answers: new Map() };
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

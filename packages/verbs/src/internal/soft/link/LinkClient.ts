// The initiator side of the soft TCP link: one connection to a peer device's LinkServer,
// authenticated for the one remote QP a local QP is connected to (its key comes from that
// QP's endpoint), so one QP's large WRs never hold up another's. Answers are untrusted too: each is
// checked against the request it claims to answer before its data is used.
import { connect, type Socket } from 'node:net';
import type { LinkAddress } from '../../../types.js';
import { ABI } from '../../abi.js';
import {
  answerDataBytes,
  FrameReader,
  LINK_PROGRESS,
  PROGRESS_BYTES,
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

/** A QP whose WRs travel over a LinkClient. */
export interface LinkOwner {
  /** The peer's answer for the WR named by `token`. */
  answer(token: number, outcome: number, status: number, rnrTimer: number, data?: Uint8Array): void;
  /** Bytes moved on the connection while this QP has frames on it: the peer is alive. */
  progress(): void;
  /** The socket no longer reads `buf` (written, or the connection is gone). */
  released(buf: Uint8Array): void;
}

const WC_REM_INV_REQ_ERR = 9;
const MAX_WC_STATUS = 21;
// The RNR timer a transport failure reports (ignored by the engine for that outcome).
const NO_RNR = 12;
/** A payload goes out in writes of this size: each one written is progress for the timer. */
export const LINK_CHUNK = 256 << 10;

interface Pending {
  owner: LinkOwner;
  token: number;
  /** bytes a successful answer must carry (READ, atomics); -1 for other opcodes */
  dataLength: number;
  /** PROGRESS reports the target may still send: one per PROGRESS_BYTES of payload */
  progressLeft: number;
}

export class LinkClient {
  readonly #sock: Socket;
  readonly #pending = new Map<number, Pending>();
  /** QPs with frames on this connection, and how many */
  readonly #owners = new Map<LinkOwner, number>();
  readonly #handshake: InitiatorHandshake;
  /** requests made before the link was authenticated (at most a window per QP) */
  #waiting: (() => void)[] = [];
  #pre: Buffer | undefined = Buffer.alloc(0);
  #answered = false;
  #open = false;
  #nextId = 1;
  #dead = false;

  constructor(address: LinkAddress, target: LinkTarget) {
    this.#handshake = new InitiatorHandshake(Buffer.from(address.key, 'base64url'), target);
    this.#sock = connect({ host: address.host, port: address.port, noDelay: true });
    this.#sock.unref();
    const deadline = setTimeout(() => this.#sock.destroy(), HANDSHAKE_DEADLINE_MS);
    deadline.unref();
    const reader = new FrameReader(RES_HEADER, (h) => this.#checkAnswer(h));
    this.#sock.on('data', (chunk: Buffer) => {
      if (this.#pre) {
        chunk = this.#authenticate(chunk, deadline) as Buffer;
        if (!chunk || chunk.length === 0) return;
      }
      let ok = true;
      try {
        ok = reader.push(chunk, (f) => this.#deliver(f));
      } catch {
        ok = false;
      }
      if (!ok)
        this.#sock.destroy(); // 'close' then fails what is pending
      else this.#progress(); // e.g. part of a large READ answer
    });
    const fail = () => {
      clearTimeout(deadline);
      this.#dead = true;
      const waiting = [...this.#pending.values()];
      this.#pending.clear();
      this.#owners.clear();
      const queued = this.#waiting;
      this.#waiting = [];
      for (const send of queued) send();
      for (const p of waiting) p.owner.answer(p.token, ABI.LINK_TRANSPORT, 0, NO_RNR);
    };
    this.#sock.on('error', fail);
    this.#sock.on('close', fail);
  }

  get dead(): boolean {
    return this.#dead;
  }

  /** Runs the handshake on what arrived; returns the bytes after it, if any. */
  #authenticate(chunk: Buffer, deadline: NodeJS.Timeout): Buffer | undefined {
    const pre = Buffer.concat([this.#pre as Buffer, chunk]);
    const needed = HELLO_BYTES + WELCOME_BYTES;
    if (pre.length < HELLO_BYTES) {
      this.#pre = pre;
      return undefined;
    }
    if (!this.#answered) {
      this.#answered = true;
      const auth = this.#handshake.answer(pre.subarray(0, HELLO_BYTES));
      if (!auth) {
        this.#sock.destroy();
        return undefined;
      }
      this.#sock.write(auth);
    }
    if (pre.length < needed) {
      this.#pre = pre;
      return undefined;
    }
    if (!this.#handshake.verify(pre.subarray(HELLO_BYTES, needed))) {
      this.#sock.destroy(); // not the device (or QP) the endpoint named
      return undefined;
    }
    clearTimeout(deadline);
    this.#pre = undefined;
    this.#open = true;
    const queued = this.#waiting;
    this.#waiting = [];
    for (const send of queued) send();
    return pre.subarray(needed);
  }

  /** The total length of the answer whose header is `h`, or -1 if it cannot be one. */
  #checkAnswer(h: Buffer): number {
    const len = h.readUInt32LE(0);
    const p = this.#pending.get(h.readUInt32LE(4));
    const outcome = h.readUInt8(8);
    const status = h.readUInt8(9);
    if (outcome === LINK_PROGRESS) {
      // More reports than the request has payload for: a target stalling us on purpose.
      if (len !== RES_HEADER || !p || p.progressLeft <= 0) return -1;
      p.progressLeft--;
      return len;
    }
    if (outcome > ABI.LINK_DISCARDED || status > MAX_WC_STATUS) return -1;
    if (len === RES_HEADER) return len;
    // Data only for a successful READ or atomic we asked for, and exactly its length.
    const ok = p && p.dataLength === len - RES_HEADER && outcome === ABI.LINK_DONE && status === 0;
    return ok ? len : -1;
  }

  #deliver(f: Buffer): void {
    const id = f.readUInt32LE(4);
    const p = this.#pending.get(id);
    if (!p) return; // not a request of ours (or of this connection)
    if (f.readUInt8(8) === LINK_PROGRESS) return; // its bytes already counted as progress
    this.#pending.delete(id);
    this.#untrack(p.owner);
    const data =
      f.length > RES_HEADER
        ? new Uint8Array(f.buffer, f.byteOffset + RES_HEADER, f.length - RES_HEADER)
        : undefined;
    if (p.dataLength > 0 && f.readUInt8(8) === ABI.LINK_DONE && f.readUInt8(9) === 0 && !data) {
      // a successful READ or atomic without its data
      p.owner.answer(p.token, ABI.LINK_TRANSPORT, 0, NO_RNR);
      return;
    }
    p.owner.answer(p.token, f.readUInt8(8), f.readUInt8(9), f.readUInt16LE(10), data);
  }

  #untrack(owner: LinkOwner): void {
    const n = (this.#owners.get(owner) ?? 1) - 1;
    if (n > 0) this.#owners.set(owner, n);
    else this.#owners.delete(owner);
  }

  #progress(): void {
    for (const owner of this.#owners.keys()) owner.progress();
  }

  /**
   * Sends the WR described by `hdr` (ABI link words); `owner.answer` gets the answer.
   * `payload` is read by the socket until `owner.released(payload)`: the caller does not
   * reuse it before (no copy here, and nothing is sent twice on a live connection).
   */
  send(hdr: Float64Array, payload: Uint8Array | undefined, owner: LinkOwner): void {
    const token = hdr[ABI.LINK_TOKEN] as number;
    if (this.#dead) {
      if (payload) owner.released(payload);
      setImmediate(() => owner.answer(token, ABI.LINK_TRANSPORT, 0, NO_RNR));
      return;
    }
    const isRead = hdr[ABI.LINK_OPCODE] === ABI.OP_RDMA_READ;
    const length = hdr[ABI.LINK_LENGTH] as number;
    if (length > this.#handshake.maxPayload && this.#open) {
      // More than the target takes in one frame: refused as a responder refuses a message
      // over its limit.
      if (payload) owner.released(payload);
      setImmediate(() => owner.answer(token, ABI.LINK_DONE, WC_REM_INV_REQ_ERR, 0));
      return;
    }
    const id = this.#nextId;
    this.#nextId = (this.#nextId + 1) >>> 0 || 1;
    // The header is built now: `hdr` is the QP's, rewritten by its next take.
    const head = writeRequestHeader(id, hdr, payload?.length ?? 0);
    const data = answerDataBytes(hdr[ABI.LINK_OPCODE] as number, length);
    const bytes = payload?.length ?? 0;
    this.#pending.set(id, {
      owner,
      token,
      dataLength: data > 0 || isRead ? data : -1,
      progressLeft: Math.floor(bytes / PROGRESS_BYTES),
    });
    this.#owners.set(owner, (this.#owners.get(owner) ?? 0) + 1);
    const go = () => this.#write(id, token, head, payload, owner, length);
    if (this.#open) go();
    else this.#waiting.push(go);
  }

  #write(
    id: number,
    token: number,
    head: Buffer,
    payload: Uint8Array | undefined,
    owner: LinkOwner,
    length: number,
  ): void {
    if (this.#dead || !this.#pending.has(id)) {
      if (payload) owner.released(payload);
      return; // failed already ('close' answered it)
    }
    if (length > this.#handshake.maxPayload) {
      this.#pending.delete(id);
      this.#untrack(owner);
      if (payload) owner.released(payload);
      setImmediate(() => owner.answer(token, ABI.LINK_DONE, WC_REM_INV_REQ_ERR, 0));
      return;
    }
    const sock = this.#sock;
    if (!payload || payload.length === 0) {
      sock.write(head);
      if (payload) owner.released(payload);
      return;
    }
    if (payload.length <= LINK_CHUNK) {
      // One system call for header and payload.
      sock.cork();
      sock.write(head);
      sock.write(payload, () => owner.released(payload));
      sock.uncork();
      return;
    }
    // Large: separate writes, so each one the kernel takes shows the peer is reading,
    // and the frames of other QPs behind it keep their timers alive too.
    sock.write(head);
    const last = payload.length - 1;
    for (let off = 0; off < payload.length; off += LINK_CHUNK) {
      const end = Math.min(payload.length, off + LINK_CHUNK);
      sock.write(payload.subarray(off, end), () => {
        if (end > last) owner.released(payload);
        this.#progress();
      });
    }
  }

  close(): void {
    this.#sock.destroy();
  }
}

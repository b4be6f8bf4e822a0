// The initiator side of the soft TCP link: one authenticated connection to a peer
// device's LinkServer, shared by this device's QPs. Answers are untrusted too: each is
// checked against the request it claims to answer before its data is used.
import { connect, type Socket } from 'node:net';
import type { LinkAddress } from '../../../types.js';
import { ABI } from '../../abi.js';
import { answerDataBytes, FrameReader, RES_HEADER, writeRequestHeader } from './frames.js';
import {
  HANDSHAKE_DEADLINE_MS,
  HELLO_BYTES,
  InitiatorHandshake,
  WELCOME_BYTES,
} from './handshake.js';

export type LinkReply = (
  outcome: number,
  status: number,
  rnrTimer: number,
  data?: Uint8Array,
) => void;

const WC_REM_INV_REQ_ERR = 9;
const MAX_WC_STATUS = 21;
// The RNR timer a transport failure reports (ignored by the engine for that outcome).
const NO_RNR = 12;

interface Pending {
  reply: LinkReply;
  /** bytes a successful answer must carry (READ, atomics); -1 for other opcodes */
  dataLength: number;
}

export class LinkClient {
  readonly #sock: Socket;
  readonly #pending = new Map<number, Pending>();
  readonly #handshake: InitiatorHandshake;
  /** requests made before the link was authenticated (at most one per QP) */
  #waiting: (() => void)[] = [];
  #pre: Buffer | undefined = Buffer.alloc(0);
  #answered = false;
  #open = false;
  #nextId = 1;
  #dead = false;

  constructor(address: LinkAddress, secret: Buffer) {
    this.#handshake = new InitiatorHandshake(secret);
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
      if (!ok) this.#sock.destroy(); // 'close' then fails what is pending
    });
    const fail = () => {
      clearTimeout(deadline);
      this.#dead = true;
      const waiting = [...this.#pending.values()];
      this.#pending.clear();
      const queued = this.#waiting;
      this.#waiting = [];
      for (const p of waiting) p.reply(ABI.LINK_TRANSPORT, 0, NO_RNR);
      for (const send of queued) send();
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
      this.#sock.destroy(); // not the device the endpoint named
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
    if (outcome > ABI.LINK_TRANSPORT || status > MAX_WC_STATUS) return -1;
    if (len === RES_HEADER) return len;
    // Data only for a successful READ or atomic we asked for, and exactly its length.
    const ok = p && p.dataLength === len - RES_HEADER && outcome === ABI.LINK_DONE && status === 0;
    return ok ? len : -1;
  }

  #deliver(f: Buffer): void {
    const id = f.readUInt32LE(4);
    const p = this.#pending.get(id);
    if (!p) return; // an answer to a request that already timed out
    this.#pending.delete(id);
    const data =
      f.length > RES_HEADER
        ? new Uint8Array(f.buffer, f.byteOffset + RES_HEADER, f.length - RES_HEADER)
        : undefined;
    if (
      p.dataLength >= 0 &&
      f.readUInt8(8) === ABI.LINK_DONE &&
      f.readUInt8(9) === 0 &&
      !data &&
      p.dataLength > 0
    ) {
      p.reply(ABI.LINK_TRANSPORT, 0, NO_RNR); // a successful READ or atomic without its data
      return;
    }
    p.reply(f.readUInt8(8), f.readUInt8(9), f.readUInt16LE(10), data);
  }

  /** Sends the WR described by `hdr` (ABI link words); `reply` gets the answer. */
  send(hdr: Float64Array, payload: Uint8Array | undefined, reply: LinkReply): void {
    if (this.#dead) {
      setImmediate(() => reply(ABI.LINK_TRANSPORT, 0, NO_RNR));
      return;
    }
    // Copied now: the QP's payload buffer is reused for its next WR, and a frame that
    // timed out may still sit in the socket's queue.
    const h = Float64Array.from(hdr);
    const body = payload && payload.length > 0 ? Buffer.from(payload) : undefined;
    const go = () => this.#send(h, body, reply);
    if (this.#open) go();
    else this.#waiting.push(go);
  }

  #send(hdr: Float64Array, body: Buffer | undefined, reply: LinkReply): void {
    if (this.#dead) {
      setImmediate(() => reply(ABI.LINK_TRANSPORT, 0, NO_RNR));
      return;
    }
    const isRead = hdr[ABI.LINK_OPCODE] === ABI.OP_RDMA_READ;
    const length = hdr[ABI.LINK_LENGTH] as number;
    if (length > this.#handshake.maxPayload) {
      // More than the target takes in one frame: refused as a responder refuses a message
      // over its limit.
      setImmediate(() => reply(ABI.LINK_DONE, WC_REM_INV_REQ_ERR, 0));
      return;
    }
    const id = this.#nextId;
    this.#nextId = (this.#nextId + 1) >>> 0 || 1;
    const data = answerDataBytes(hdr[ABI.LINK_OPCODE] as number, length);
    this.#pending.set(id, { reply, dataLength: data > 0 || isRead ? data : -1 });
    this.#sock.write(writeRequestHeader(id, hdr, body?.length ?? 0));
    if (body) this.#sock.write(body);
  }

  close(): void {
    this.#sock.destroy();
  }
}

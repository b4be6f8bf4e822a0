// Frames of the soft TCP link, after the handshake (handshake.ts). Since link protocol 3: each QP
// of a pair dials the other, and the connection a QP dialed carries, from it, both its
// requests and its answers to the peer's requests (one write for an answer and the next
// request: a round trip is one write and one read each way, as a TCP ping-pong). The other
// direction carries only answers, to requests whose target has no connection back to their
// source (FLAG_ANSWER_BACK unset, or the target QP not connected to it over the link).
//
// request  (52 B + payload): len u32, reqId u32, opcode u8, flags u8, pad×2, imm u32,
//                            remoteAddr f64, rkey u32, length u32, dstSlot u32, dstGen u32,
//                            srcQpn u32, srcPid u32, token u32 (names the WR: a resend after
//                            a failed connection carries the same one, and the target answers
//                            it from memory instead of running it twice). READ carries no
//                            payload; an atomic carries its operands compare_add, swap (u64 LE
//                            each). flags bit 0 (HEAD): the initiator's oldest unfinished WR;
//                            the others must follow the last one run, in order, or are
//                            discarded (several WRs of a QP are in flight, as RC's PSNs).
//                            flags bit 1 (ANSWER_BACK): answer on the target QP's own
//                            connection back to the source QP when it has one (LinkServer),
//                            not on this one (the initiator reads answers on both).
//                            flags bit 2 (SOLICITED, protocol 5): the WR's IBV_SEND_SOLICITED;
//                            only on SEND, SEND_WITH_IMM and RDMA_WRITE_WITH_IMM (the
//                            operations that complete a receive), malformed on any other.
// response (12 B + data):    len u32 with ANSWER_BIT set (the frame's length below it), reqId
//                            u32, outcome u8, status u8, rnrTimer u16;
//                            data only for a successful READ, exactly its length, or a
//                            successful atomic, its 8-byte prior value. Outcome DISCARDED:
//                            not run (an earlier WR was not), send it again. Outcome
//                            PROGRESS (header only): not an answer — the target has received
//                            another PROGRESS_BYTES of that request, so the initiator's ACK
//                            timer measures silence, not the size of one large WR.
//
// Every header is validated as soon as its bytes are in, before any payload is buffered:
// a frame longer than the connection's limit is refused without reading it.
import { ABI } from '../../abi.js';

/** A request's header (abi.h: linkTake writes it too). */
export const REQ_HEADER = ABI.LINK_REQ_HEADER;
/** A response's header (abi.h: respondFrame writes it too). */
export const RES_HEADER = ABI.LINK_RES_HEADER;
/** Set in an answer's length word: requests and answers share a connection (protocol 3). */
export const ANSWER_BIT = ABI.LINK_ANSWER_BIT;

/** True when the frame at `b[o..]` (at least its first 4 bytes) is an answer. */
export function isAnswer(b: Buffer, o: number): boolean {
  return ((b[o + 3] as number) & 0x80) !== 0;
}

/** The header size of the frame at `b[o..]`, from its first RES_HEADER bytes. */
export function headerSize(b: Buffer, o: number): number {
  return isAnswer(b, o) ? RES_HEADER : REQ_HEADER;
}

/** The length an answer header at `b[o..]` declares (its ANSWER_BIT masked off). */
export function answerLength(b: Buffer, o: number): number {
  // Read as int32 and masked: a small integer, not a heap number per answer (the word with
  // ANSWER_BIT set is above what a small integer holds).
  return b.readInt32LE(o) & ~ANSWER_BIT;
}
/** The request id a frame header at `b[o..]` names (requests and answers alike). */
export function frameReqId(b: Buffer, o: number): number {
  return b.readUInt32LE(o + 4);
}

/** An atomic request's payload: its two 64-bit operands. */
export const ATOMIC_REQUEST_BYTES = ABI.ATOMIC_OPERAND_WORDS * 8;

export function isAtomicOpcode(opcode: number): boolean {
  return opcode === ABI.OP_ATOMIC_CMP_AND_SWP || opcode === ABI.OP_ATOMIC_FETCH_AND_ADD;
}

/** Bytes of data a successful answer to `opcode` carries (`length` is the request's). */
export function answerDataBytes(opcode: number, length: number): number {
  if (opcode === ABI.OP_RDMA_READ) return length;
  return isAtomicOpcode(opcode) ? ABI.ATOMIC_BYTES : 0;
}
/**
 * The token after `token`: tokens run 1 … 2^32 − 1 and then 1 again (0 means none), as the
 * initiator names its send queue's WRs (native soft/device.h, send_token).
 */
export function nextLinkToken(token: number): number {
  return token >= 0xffffffff ? 1 : token + 1;
}

export const FLAG_HEAD = ABI.LINK_FLAG_HEAD;
export const FLAG_ANSWER_BACK = ABI.LINK_FLAG_ANSWER_BACK;
export const FLAG_SOLICITED = ABI.LINK_FLAG_SOLICITED;

/** The operations that consume a receive at the target (and so may be solicited). */
export function consumesRecv(opcode: number): boolean {
  return (
    opcode === ABI.OP_SEND ||
    opcode === ABI.OP_SEND_WITH_IMM ||
    opcode === ABI.OP_RDMA_WRITE_WITH_IMM
  );
}
/** Response outcome (link-only, beyond the engine's LINK_* outcomes): bytes arrived. */
export const LINK_PROGRESS = 0xff;
/** A target reports progress each time this much more of one request has arrived. */
export const PROGRESS_BYTES = 1 << 20;

export interface RequestHeader {
  len: number;
  reqId: number;
  opcode: number;
  imm: number;
  remoteAddr: number;
  rkey: number;
  length: number;
  slot: number;
  gen: number;
  srcQpn: number;
  srcPid: number;
  token: number;
  /** the initiator's oldest unfinished WR (FLAG_HEAD) */
  head: boolean;
  /** the WR's IBV_SEND_SOLICITED (FLAG_SOLICITED) */
  solicited: boolean;
}

/** A header record to parse into again and again (no object per frame). */
export function newRequestHeader(): RequestHeader {
  return {
    len: 0,
    reqId: 0,
    opcode: 0,
    imm: 0,
    remoteAddr: 0,
    rkey: 0,
    length: 0,
    slot: 0,
    gen: 0,
    srcQpn: 0,
    srcPid: 0,
    token: 0,
    head: false,
    solicited: false,
  };
}

/** The frame length a request header at `b[o..]` declares, or -1 when it is malformed. */
export function checkRequestHeader(b: Buffer, o: number, maxPayload: number): number {
  const len = b.readUInt32LE(o);
  const opcode = b[o + 8] as number;
  const length = b.readUInt32LE(o + 28);
  const remoteAddr = b.readDoubleLE(o + 16);
  const flags = b[o + 9] as number;
  // Flag bits nobody defined are a malformed frame, not something to ignore.
  if ((flags & ~(FLAG_HEAD | FLAG_ANSWER_BACK | FLAG_SOLICITED)) !== 0) return -1;
  if (opcode > ABI.OP_LAST || length > maxPayload) return -1;
  // Solicited means something only on an operation that completes a receive.
  if ((flags & FLAG_SOLICITED) !== 0 && !consumesRecv(opcode)) return -1;
  if (isAtomicOpcode(opcode) && length !== ATOMIC_REQUEST_BYTES) return -1;
  if (len !== (opcode === ABI.OP_RDMA_READ ? REQ_HEADER : REQ_HEADER + length)) return -1;
  if (!Number.isSafeInteger(remoteAddr) || remoteAddr < 0) return -1;
  return len;
}

/**
 * Parses the request header at `b[o..]` that checkRequestHeader already passed (it declared
 * `len`) into `h`: the frame reader checked it before handing the frame over, once.
 */
export function parseRequestHeader(b: Buffer, o: number, len: number, h: RequestHeader): void {
  h.len = len;
  h.reqId = frameReqId(b, o);
  h.opcode = b[o + 8] as number;
  h.head = ((b[o + 9] as number) & FLAG_HEAD) !== 0;
  h.solicited = ((b[o + 9] as number) & FLAG_SOLICITED) !== 0;
  h.imm = b.readUInt32LE(o + 12);
  h.remoteAddr = b.readDoubleLE(o + 16);
  h.rkey = b.readUInt32LE(o + 24);
  h.length = b.readUInt32LE(o + 28);
  h.slot = b.readUInt32LE(o + 32);
  h.gen = b.readUInt32LE(o + 36);
  h.srcQpn = b.readUInt32LE(o + 40);
  h.srcPid = b.readUInt32LE(o + 44);
  h.token = b.readUInt32LE(o + 48);
}

/**
 * Writes the request header of the WR the native side handed out (ABI link words) at b[o..]
 * (asking for the answer on the target's connection back: FLAG_ANSWER_BACK).
 */
export function writeRequestHeader(
  b: Buffer,
  o: number,
  reqId: number,
  hdr: Float64Array,
  payloadLength: number,
): void {
  b.writeUInt32LE(REQ_HEADER + payloadLength, o);
  b.writeUInt32LE(reqId, o + 4);
  b[o + 8] = hdr[ABI.LINK_OPCODE] as number;
  b[o + 9] =
    (hdr[ABI.LINK_HEAD] === 1 ? FLAG_HEAD : 0) |
    FLAG_ANSWER_BACK |
    (hdr[ABI.LINK_SOLICITED] === 1 ? FLAG_SOLICITED : 0);
  b[o + 10] = 0;
  b[o + 11] = 0;
  b.writeUInt32LE(hdr[ABI.LINK_IMM] as number, o + 12);
  b.writeDoubleLE(hdr[ABI.LINK_REMOTE_ADDR] as number, o + 16);
  b.writeUInt32LE(hdr[ABI.LINK_RKEY] as number, o + 24);
  b.writeUInt32LE(hdr[ABI.LINK_LENGTH] as number, o + 28);
  b.writeUInt32LE(hdr[ABI.LINK_DST_SLOT] as number, o + 32);
  b.writeUInt32LE(hdr[ABI.LINK_DST_GEN] as number, o + 36);
  b.writeUInt32LE(hdr[ABI.LINK_SRC_QPN] as number, o + 40);
  b.writeUInt32LE(hdr[ABI.LINK_SRC_PID] as number, o + 44);
  b.writeUInt32LE(hdr[ABI.LINK_TOKEN] as number, o + 48);
}

/** Writes a response header at `b[o..]` for a frame of `dataBytes` data after it. */
export function writeResponseHeader(
  b: Buffer,
  o: number,
  reqId: number,
  outcome: number,
  status: number,
  rnrTimer: number,
  dataBytes: number,
): void {
  // Byte by byte: the word with ANSWER_BIT set would be a heap number per answer.
  const len = RES_HEADER + dataBytes;
  b[o] = len & 0xff;
  b[o + 1] = (len >>> 8) & 0xff;
  b[o + 2] = (len >>> 16) & 0xff;
  b[o + 3] = (ANSWER_BIT >>> 24) | ((len >>> 24) & 0x7f);
  b.writeUInt32LE(reqId, o + 4);
  b[o + 8] = outcome;
  b[o + 9] = status;
  b.writeUInt16LE(rnrTimer, o + 10);
}

/** Copies `n` bytes (a loop for header-sized runs: no view object for them). */
export function copyBytes(
  src: Uint8Array,
  from: number,
  dst: Uint8Array,
  to: number,
  n: number,
): void {
  if (n <= 64) {
    for (let i = 0; i < n; i++) dst[to + i] = src[from + i] as number;
  } else {
    dst.set(new Uint8Array(src.buffer, src.byteOffset + from, n), to);
  }
}

/** A frame being assembled across chunks is kept in a buffer this large at rest. */
const CARRY_KEEP = 64 << 10;

/**
 * Takes the payload of a frame that spans chunks where each chunk has it, instead of
 * gathering it in the reader's carry buffer first (the TCP link's target puts an RDMA WRITE
 * straight into the target memory: one copy fewer, and no buffer of the frame's size).
 */
export interface FramePlacer {
  /**
   * The checked header of a frame of `len` bytes that spans chunks is at `buf[off..]`: true
   * to take its payload piece by piece (then only the header is kept, and onFrame gets the
   * frame's header alone, with its whole length).
   */
  begin(buf: Buffer, off: number, len: number): boolean;
  /** Payload bytes `[at, at + n)` of the frame begin() took are `chunk[pos, pos + n)`. */
  piece(chunk: Buffer, pos: number, n: number, at: number): void;
}

/**
 * Splits a byte stream into length-prefixed frames without allocating per frame. A frame's
 * header is `headerBytes` long, or — with a function — as long as it says from the frame's
 * first `minHeader` bytes (requests and answers share a connection). `check(buf, off)` sees
 * each frame's whole header before anything past it is kept and returns the frame's total
 * length, or -1 to refuse the stream (the caller drops the connection).
 * `onFrame(buf, off, len)` gets each whole frame where it lies — in the chunk itself, or in
 * the reader's carry buffer when it spanned chunks — and must be done with those bytes when
 * it returns; it returns false to stop here (backpressure: `resume()` goes on with that frame).
 * Each byte is copied at most once, however many chunks a large frame arrives in; not at all
 * here when a `placer` takes the frame's payload (FramePlacer).
 */
export class FrameReader {
  #carry: Buffer = Buffer.allocUnsafe(CARRY_KEEP);
  #have = 0; // bytes of the frame in progress held in #carry
  #need = -1; // total length of the frame in #carry, once its header was checked
  #hb = -1; // header size of the frame in #carry, once known
  readonly #minHeader: number;
  readonly #sizeOf: ((buf: Buffer, off: number) => number) | undefined;
  readonly #check: (buf: Buffer, off: number) => number;
  readonly #onFrame: (buf: Buffer, off: number, len: number) => boolean;
  readonly #placer: FramePlacer | undefined;
  /** the frame in progress has its payload taken by the placer (only its header is carried) */
  #placing = false;
  // Stopped by onFrame: the rest of the chunk it was in, and chunks that came after.
  #stopped = false;
  #rest: Buffer | undefined;
  #restAt = 0;
  #later: Buffer[] = [];
  /** chunks are the caller's reused read buffer: what is kept past push() is copied */
  readonly #reusedChunks: boolean;

  constructor(
    headerBytes: number | { minHeader: number; sizeOf: (buf: Buffer, off: number) => number },
    check: (buf: Buffer, off: number) => number,
    onFrame: (buf: Buffer, off: number, len: number) => boolean,
    placer?: FramePlacer,
    reusedChunks = false,
  ) {
    this.#reusedChunks = reusedChunks;
    if (typeof headerBytes === 'number') {
      this.#minHeader = headerBytes;
      this.#sizeOf = undefined;
    } else {
      this.#minHeader = headerBytes.minHeader;
      this.#sizeOf = headerBytes.sizeOf;
    }
    this.#check = check;
    this.#onFrame = onFrame;
    this.#placer = placer;
  }

  /** Bytes held of the frame not complete yet. */
  get buffered(): number {
    return this.#have;
  }

  /** The checked header of the frame being read, while it is incomplete (in the carry). */
  get partial(): Buffer | undefined {
    return this.#need < 0 || this.#have >= this.#need ? undefined : this.#carry;
  }

  /** True while onFrame stopped the reader (resume() goes on). */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Feeds `chunk[start, end)`; false on a malformed stream. */
  push(chunk: Buffer, start = 0, end = chunk.length): boolean {
    if (this.#stopped) {
      // Kept as it is: the caller paused the socket, this is what was already on its way.
      this.#later.push(this.#kept(chunk, start, end));
      return true;
    }
    return this.#run(chunk, start, end);
  }

  /** Goes on after onFrame returned false; false on a malformed stream. */
  resume(): boolean {
    if (!this.#stopped) return true;
    this.#stopped = false;
    if (this.#need >= 0 && this.#have >= this.#need) {
      // The frame that was stopped lies whole in the carry.
      if (!this.#frameFromCarry()) return true;
    }
    const rest = this.#rest;
    this.#rest = undefined;
    if (rest && !this.#run(rest, this.#restAt, rest.length)) return false;
    while (!this.#stopped && this.#later.length > 0) {
      if (!this.#run(this.#later.shift() as Buffer, 0, undefined)) return false;
    }
    return true;
  }

  #stop(chunk: Buffer, at: number, end: number): void {
    this.#stopped = true;
    if (at < end) {
      this.#rest = this.#kept(chunk, at, end);
      this.#restAt = 0;
    }
  }

  /** `chunk[at, end)` to keep past this call (a copy when the caller reuses its chunks). */
  #kept(chunk: Buffer, at: number, end: number): Buffer {
    // Only while answers back up (stopped): a copy then costs nothing in steady state.
    if (this.#reusedChunks) return Buffer.from(chunk.subarray(at, end));
    return at === 0 && end === chunk.length ? chunk : chunk.subarray(at, end);
  }

  /** Delivers the whole frame in the carry; false when onFrame stopped on it. */
  #frameFromCarry(): boolean {
    const n = this.#need;
    if (!this.#onFrame(this.#carry, 0, n)) {
      this.#stopped = true;
      return false;
    }
    this.#need = -1;
    this.#hb = -1;
    this.#have = 0;
    this.#placing = false;
    if (this.#carry.length > CARRY_KEEP) this.#carry = Buffer.allocUnsafe(CARRY_KEEP);
    return true;
  }

  /** A frame of `need` bytes spanning chunks starts at `buf[off..]`: placed, or carried. */
  #begin(buf: Buffer, off: number, need: number): void {
    this.#need = need;
    this.#placing = this.#placer?.begin(buf, off, need) === true;
    if (!this.#placing) this.#fit(need);
  }

  /** The header size of the frame at `b[o..]` (its first minHeader bytes are there), or -1. */
  #headerOf(b: Buffer, o: number): number {
    const sizeOf = this.#sizeOf;
    if (sizeOf === undefined) return this.#minHeader;
    const n = sizeOf(b, o);
    return n >= this.#minHeader && n <= CARRY_KEEP ? n : -1;
  }

  #run(chunk: Buffer, start: number, endArg: number | undefined): boolean {
    const end = endArg ?? chunk.length;
    const min = this.#minHeader;
    let pos = start;
    while (pos < end) {
      if (this.#have > 0) {
        // Continuing a frame that spans chunks.
        if (this.#need < 0) {
          if (this.#hb < 0) {
            const take = Math.min(min - this.#have, end - pos);
            copyBytes(chunk, pos, this.#carry, this.#have, take);
            this.#have += take;
            pos += take;
            if (this.#have < min) return true;
            this.#hb = this.#headerOf(this.#carry, 0);
            if (this.#hb < 0) return false;
          }
          const hb = this.#hb;
          const take = Math.min(hb - this.#have, end - pos);
          copyBytes(chunk, pos, this.#carry, this.#have, take);
          this.#have += take;
          pos += take;
          if (this.#have < hb) return true;
          const need = this.#check(this.#carry, 0);
          if (need < hb) return false;
          if (need === hb) {
            this.#need = need;
          } else this.#begin(this.#carry, 0, need);
        }
        const take = Math.min(this.#need - this.#have, end - pos);
        if (take > 0) {
          if (this.#placing)
            (this.#placer as FramePlacer).piece(chunk, pos, take, this.#have - this.#hb);
          else copyBytes(chunk, pos, this.#carry, this.#have, take);
        }
        this.#have += take;
        pos += take;
        if (this.#have < this.#need) return true;
        if (!this.#frameFromCarry()) {
          this.#stop(chunk, pos, end);
          return true;
        }
        continue;
      }
      if (end - pos < min) {
        copyBytes(chunk, pos, this.#carry, 0, end - pos);
        this.#have = end - pos;
        return true;
      }
      const hb = this.#headerOf(chunk, pos);
      if (hb < 0) return false;
      if (end - pos < hb) {
        copyBytes(chunk, pos, this.#carry, 0, end - pos);
        this.#have = end - pos;
        this.#hb = hb;
        return true;
      }
      const need = this.#check(chunk, pos);
      if (need < hb) return false;
      if (end - pos >= need) {
        if (!this.#onFrame(chunk, pos, need)) {
          this.#stop(chunk, pos, end);
          return true;
        }
        pos += need;
        continue;
      }
      // Incomplete: carried (or placed) until the rest arrives.
      this.#hb = hb;
      this.#begin(chunk, pos, need);
      if (this.#placing) {
        copyBytes(chunk, pos, this.#carry, 0, hb);
        if (end - pos > hb) (this.#placer as FramePlacer).piece(chunk, pos + hb, end - pos - hb, 0);
      } else copyBytes(chunk, pos, this.#carry, 0, end - pos);
      this.#have = end - pos;
      return true;
    }
    return true;
  }

  /** The carry can hold a frame of `n` bytes (its bytes so far kept). */
  #fit(n: number): void {
    if (this.#carry.length >= n) return;
    const bigger = Buffer.allocUnsafe(n);
    copyBytes(this.#carry, 0, bigger, 0, this.#have);
    this.#carry = bigger;
  }
}

/**
 * One request frame's bytes, header then payload, reused frame after frame (the QP's pool).
 * The socket is handed an exact-length view; the last one is kept, so frames of one size
 * allocate nothing.
 */
export class FrameBuffer {
  readonly buf: Buffer;
  #view: Buffer | undefined;

  constructor(payloadCapacity: number) {
    this.buf = Buffer.allocUnsafeSlow(REQ_HEADER + payloadCapacity);
  }

  /** Payload bytes it holds. */
  get capacity(): number {
    return this.buf.length - REQ_HEADER;
  }

  /** Its first `len` bytes. */
  view(len: number): Buffer {
    if (len === this.buf.length) return this.buf;
    const v = this.#view;
    if (v !== undefined && v.length === len) return v;
    this.#view = this.buf.subarray(0, len);
    return this.#view;
  }
}

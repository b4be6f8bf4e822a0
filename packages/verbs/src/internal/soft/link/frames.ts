// Frames of the soft TCP link, after the handshake (handshake.ts).
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
// response (12 B + data):    len u32, reqId u32, outcome u8, status u8, rnrTimer u16;
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

export const REQ_HEADER = 52;
export const RES_HEADER = 12;
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
export const FLAG_HEAD = 1;
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
}

/** Parses and checks a request header; undefined when the frame is malformed. */
export function readRequestHeader(h: Buffer, maxPayload: number): RequestHeader | undefined {
  const len = h.readUInt32LE(0);
  const opcode = h.readUInt8(8);
  const length = h.readUInt32LE(28);
  const remoteAddr = h.readDoubleLE(16);
  // Flag bits nobody defined are a malformed frame, not something to ignore.
  if ((h.readUInt8(9) & ~FLAG_HEAD) !== 0) return undefined;
  if (opcode > ABI.OP_LAST || length > maxPayload) return undefined;
  if (isAtomicOpcode(opcode) && length !== ATOMIC_REQUEST_BYTES) return undefined;
  if (len !== (opcode === ABI.OP_RDMA_READ ? REQ_HEADER : REQ_HEADER + length)) return undefined;
  if (!Number.isSafeInteger(remoteAddr) || remoteAddr < 0) return undefined;
  return {
    len,
    reqId: h.readUInt32LE(4),
    opcode,
    imm: h.readUInt32LE(12),
    remoteAddr,
    rkey: h.readUInt32LE(24),
    length,
    slot: h.readUInt32LE(32),
    gen: h.readUInt32LE(36),
    srcQpn: h.readUInt32LE(40),
    srcPid: h.readUInt32LE(44),
    token: h.readUInt32LE(48),
    head: (h.readUInt8(9) & FLAG_HEAD) !== 0,
  };
}

/** The request header of the WR the native side handed out (ABI link words). */
export function writeRequestHeader(
  reqId: number,
  hdr: Float64Array,
  payloadLength: number,
): Buffer {
  const h = Buffer.allocUnsafe(REQ_HEADER).fill(0);
  h.writeUInt32LE(REQ_HEADER + payloadLength, 0);
  h.writeUInt32LE(reqId, 4);
  h.writeUInt8(hdr[ABI.LINK_OPCODE] as number, 8);
  h.writeUInt8(hdr[ABI.LINK_HEAD] === 1 ? FLAG_HEAD : 0, 9);
  h.writeUInt32LE(hdr[ABI.LINK_IMM] as number, 12);
  h.writeDoubleLE(hdr[ABI.LINK_REMOTE_ADDR] as number, 16);
  h.writeUInt32LE(hdr[ABI.LINK_RKEY] as number, 24);
  h.writeUInt32LE(hdr[ABI.LINK_LENGTH] as number, 28);
  h.writeUInt32LE(hdr[ABI.LINK_DST_SLOT] as number, 32);
  h.writeUInt32LE(hdr[ABI.LINK_DST_GEN] as number, 36);
  h.writeUInt32LE(hdr[ABI.LINK_SRC_QPN] as number, 40);
  h.writeUInt32LE(hdr[ABI.LINK_SRC_PID] as number, 44);
  h.writeUInt32LE(hdr[ABI.LINK_TOKEN] as number, 48);
  return h;
}

export function writeResponse(
  reqId: number,
  outcome: number,
  status: number,
  rnrTimer: number,
  data: Uint8Array | undefined,
): Buffer {
  const answer = Buffer.allocUnsafe(RES_HEADER + (data ? data.length : 0));
  answer.writeUInt32LE(answer.length, 0);
  answer.writeUInt32LE(reqId, 4);
  answer.writeUInt8(outcome, 8);
  answer.writeUInt8(status, 9);
  answer.writeUInt16LE(rnrTimer, 10);
  if (data) answer.set(data, RES_HEADER);
  return answer;
}

/** The header-only PROGRESS response for request `reqId`. */
export function writeProgress(reqId: number): Buffer {
  const b = Buffer.alloc(RES_HEADER);
  b.writeUInt32LE(RES_HEADER, 0);
  b.writeUInt32LE(reqId, 4);
  b.writeUInt8(LINK_PROGRESS, 8);
  return b;
}

/**
 * Splits a byte stream into length-prefixed frames. `check(header)` sees each frame's
 * first `headerBytes` before anything past them is kept and returns the frame's total
 * length, or -1 to refuse the stream (the caller drops the connection). Each byte is
 * copied at most once, however many chunks a large frame arrives in.
 */
export class FrameReader {
  #chunks: Buffer[] = [];
  #have = 0;
  #need = -1; // total length of the frame in progress, once its header was checked
  readonly #headerBytes: number;
  readonly #check: (header: Buffer) => number;

  constructor(headerBytes: number, check: (header: Buffer) => number) {
    this.#headerBytes = headerBytes;
    this.#check = check;
  }

  /** Bytes held for frames not complete yet. */
  get buffered(): number {
    return this.#have;
  }

  /** The checked header of the frame being read, while it is incomplete. */
  get partialHeader(): Buffer | undefined {
    return this.#need < 0 ? undefined : (this.#chunks[0] as Buffer).subarray(0, this.#headerBytes);
  }

  /** Returns false on a malformed stream. */
  push(chunk: Buffer, onFrame: (frame: Buffer) => void): boolean {
    this.#chunks.push(chunk);
    this.#have += chunk.length;
    for (;;) {
      if (this.#need < 0) {
        if (this.#have < this.#headerBytes) return true;
        this.#flatten();
        const need = this.#check((this.#chunks[0] as Buffer).subarray(0, this.#headerBytes));
        if (need < this.#headerBytes) return false;
        this.#need = need;
      }
      if (this.#have < this.#need) return true;
      this.#flatten();
      const all = this.#chunks[0] as Buffer;
      const need = this.#need;
      this.#need = -1;
      onFrame(all.subarray(0, need));
      const rest = all.subarray(need);
      this.#chunks = rest.length ? [rest] : [];
      this.#have = rest.length;
    }
  }

  #flatten(): void {
    if (this.#chunks.length > 1) this.#chunks = [Buffer.concat(this.#chunks, this.#have)];
  }
}

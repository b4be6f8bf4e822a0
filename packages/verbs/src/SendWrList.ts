import { ABI } from './internal/abi.js';
import { operandView, packSendWr, sendWrWords } from './internal/encode.js';
import { kWords } from './internal/symbols.js';
import { checkInt, intError, invalid, MAX_ADDR, MAX_U32, MAX_WR_ID } from './internal/validate.js';
import type { SendWr } from './types.js';

/** Most records a SendWrList holds (the deepest send queue a device offers is smaller). */
export const MAX_SEND_WR_LIST = 1 << 20;
// This file's own checks of the per-record hot paths (addRead, the setters): the shared
// isIntIn is called with anything from everywhere, and once inlined here its mixed type
// feedback made an addRead three times slower. Same ranges as validate.ts.
/** An integer in [0, 2^32). */
function isU32(v: unknown): v is number {
  return typeof v === 'number' && v >>> 0 === v;
}
/** An integer in [0, 2^53). */
function isAddr(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

const OP_RDMA_READ = ABI.OP_RDMA_READ;
// Field offsets of a send record and its SGEs (abi.h "Packed work requests").
const WR_ID = ABI.SEND_WR_ID;
const WR_OPCODE = ABI.SEND_WR_OPCODE;
const WR_FLAGS = ABI.SEND_WR_FLAGS;
const WR_IMM = ABI.SEND_WR_IMM;
const WR_REMOTE_ADDR = ABI.SEND_WR_REMOTE_ADDR;
const WR_RKEY = ABI.SEND_WR_RKEY;
const WR_NUM_SGE = ABI.SEND_WR_NUM_SGE;
const SGE0 = ABI.SEND_WR_HEADER_WORDS;
/** Words of an addRead() record: the header and one SGE. */
const READ_RECORD_WORDS = ABI.SEND_WR_HEADER_WORDS + ABI.SGE_WORDS;
/** Largest message a record may name; each QP's own maximum is checked at post. */
const MAX_RECORD_BYTES = 0xffffffff;

/**
 * A reusable batch of send work requests kept pre-encoded in the layout the addon reads
 * (abi.h "Packed work requests"): each record is validated and written once, by add(),
 * and `qp.postSendList(list, start, count)` posts any run of them in one crossing, with no
 * per-WR object read or check at post time. Between posts a record's wrId, signaled flag,
 * remote address and key can be rewritten in place (setters: a few array stores), so a
 * list built once is posted many times without allocating. Both providers take the same
 * records: soft executes them, ibverbs builds its ibv_send_wr chain from them.
 *
 * The QP-dependent limits (SGEs per WR, inline size, message size) are checked at post
 * against the largest values any record of the list has, before anything is posted.
 */
/** addRead's error, built only when it throws: the first bad argument, as add() names it. */
function readError(addr: unknown, length: unknown, lkey: unknown, remote: unknown, rkey: unknown) {
  if (!isAddr(addr)) return intError('sge.addr', addr, 0, MAX_ADDR);
  if (!isU32(length)) return intError('sge.length', length, 0, MAX_U32);
  if (!isU32(lkey)) return intError('sge.lkey', lkey, 0, MAX_U32);
  if (!isAddr(remote)) return intError('RDMA_READ remoteAddr', remote, 0, MAX_ADDR);
  return intError('RDMA_READ rkey', rkey, 0, MAX_U32);
}

export class SendWrList {
  readonly capacity: number;
  /** SGEs a record may have (the words reserved per record). */
  readonly maxSge: number;
  /**
   * The packed records (the addon reads them from `start(i)`): private, so nothing writes
   * them past add()'s checks and the list-wide limits; QueuePair reads them via kWords.
   */
  readonly #words: Float64Array;
  readonly #operands: BigUint64Array;
  /** Word offset of record i (i ≤ length: the next record's start). */
  readonly #starts: Uint32Array;
  #count = 0;
  /** Largest SGE count, inline payload and message of any record (checked at post). */
  #maxSgeUsed = 0;
  #maxInlineBytes = 0;
  #maxBytes = 0;

  constructor(capacity: number, options?: { maxSge?: number }) {
    this.capacity = checkInt('capacity', capacity, 1, MAX_SEND_WR_LIST);
    this.maxSge = checkInt('maxSge', options?.maxSge ?? 1, 1, 64);
    this.#words = new Float64Array(capacity * sendWrWords(this.maxSge));
    this.#operands = operandView(this.#words);
    this.#starts = new Uint32Array(capacity + 1);
  }

  /** @internal the packed records, for QueuePair.postSendList (module-private key). */
  get [kWords](): Float64Array {
    return this.#words;
  }

  /** Records added since the last clear(). */
  get length(): number {
    return this.#count;
  }

  /** @internal largest SGE count of a record. */
  get maxSgeUsed(): number {
    return this.#maxSgeUsed;
  }

  /** @internal largest inline payload of a record (0: none inline). */
  get maxInlineBytes(): number {
    return this.#maxInlineBytes;
  }

  /** @internal largest message of a record. */
  get maxBytes(): number {
    return this.#maxBytes;
  }

  /** @internal word offset of record `i` (0 ≤ i ≤ length). */
  start(i: number): number {
    return this.#starts[i] as number;
  }

  /** Empties the list (its memory is kept). */
  clear(): void {
    this.#count = 0;
    this.#maxSgeUsed = 0;
    this.#maxInlineBytes = 0;
    this.#maxBytes = 0;
  }

  /**
   * Appends `wr`, validated as postSend validates it (ERR_RDMA_INVALID_ARG,
   * ERR_RDMA_OUT_OF_RANGE; nothing is added then). Returns its index.
   */
  add(wr: SendWr): number {
    const i = this.#room();
    const p = this.#starts[i] as number;
    const next = packSendWr(
      this.#words,
      this.#operands,
      p,
      wr,
      this.maxSge,
      MAX_RECORD_BYTES,
      MAX_RECORD_BYTES,
    );
    const numSge = this.#words[p + WR_NUM_SGE] as number;
    let total = 0;
    for (let k = 0; k < numSge; k++)
      total += this.#words[p + SGE0 + ABI.SGE_WORDS * k + ABI.SGE_LENGTH] as number;
    this.#note(numSge, total, wr.inline === true);
    this.#starts[i + 1] = next;
    this.#count = i + 1;
    return i;
  }

  /**
   * Appends an unsignaled RDMA READ of `length` bytes at `remoteAddr` (key `rkey`) into
   * `[addr, +length)` of local memory with key `lkey`: add() without a WR object. Returns
   * its index.
   */
  addRead(addr: number, length: number, lkey: number, remoteAddr: number, rkey: number): number {
    if (!(isAddr(addr) && isU32(length) && isU32(lkey) && isAddr(remoteAddr) && isU32(rkey)))
      throw readError(addr, length, lkey, remoteAddr, rkey);
    const i = this.#count;
    if (i === this.capacity) throw invalid(`the SendWrList is full (${this.capacity} records)`);
    const w = this.#words;
    const p = this.#starts[i] as number;
    w[p + WR_ID] = 0;
    w[p + WR_OPCODE] = OP_RDMA_READ;
    w[p + WR_FLAGS] = 0;
    w[p + WR_IMM] = 0;
    w[p + WR_REMOTE_ADDR] = remoteAddr;
    w[p + WR_RKEY] = rkey;
    w[p + WR_NUM_SGE] = 1;
    w[p + SGE0 + ABI.SGE_ADDR] = addr;
    w[p + SGE0 + ABI.SGE_LENGTH] = length;
    w[p + SGE0 + ABI.SGE_LKEY] = lkey;
    if (this.#maxSgeUsed === 0) this.#maxSgeUsed = 1;
    if (length > this.#maxBytes) this.#maxBytes = length;
    this.#starts[i + 1] = p + READ_RECORD_WORDS;
    this.#count = i + 1;
    return i;
  }

  /** Sets record `i`'s wrId (an integer in [0, 2^53)). */
  setWrId(i: number, wrId: number): void {
    const p = this.#at(i);
    if (!isAddr(wrId)) throw intError('wrId', wrId, 0, MAX_WR_ID);
    this.#words[p + WR_ID] = wrId;
  }

  /** Sets whether record `i` makes a completion when it succeeds. */
  setSignaled(i: number, signaled: boolean): void {
    const p = this.#at(i);
    const flags = this.#words[p + WR_FLAGS] as number;
    this.#words[p + WR_FLAGS] = signaled ? flags | ABI.FLAG_SIGNALED : flags & ~ABI.FLAG_SIGNALED;
  }

  /** Sets record `i`'s remote address and key (its opcode must be an RDMA one). */
  setRemote(i: number, remoteAddr: number, rkey: number): void {
    const p = this.#at(i);
    if ((this.#words[p + WR_OPCODE] as number) < ABI.OP_RDMA_WRITE)
      throw invalid(`record ${i} is a SEND: it has no remote address`);
    if (!isAddr(remoteAddr)) throw intError('remoteAddr', remoteAddr, 0, MAX_ADDR);
    if (!isU32(rkey)) throw intError('rkey', rkey, 0, MAX_U32);
    this.#words[p + WR_REMOTE_ADDR] = remoteAddr;
    this.#words[p + WR_RKEY] = rkey;
  }

  #room(): number {
    if (this.#count === this.capacity)
      throw invalid(`the SendWrList is full (${this.capacity} records)`);
    return this.#count;
  }

  #at(i: number): number {
    if (!(isU32(i) && i < this.#count)) throw intError('index', i, 0, this.#count - 1);
    return this.#starts[i] as number;
  }

  #note(numSge: number, total: number, inline: boolean): void {
    if (numSge > this.#maxSgeUsed) this.#maxSgeUsed = numSge;
    if (total > this.#maxBytes) this.#maxBytes = total;
    if (inline && total > this.#maxInlineBytes) this.#maxInlineBytes = total;
  }
}

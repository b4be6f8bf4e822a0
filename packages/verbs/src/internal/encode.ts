// Validates work requests and packs them into the Float64Array the native side reads:
// send: wrId, opcode, flags, imm, remoteAddr, rkey, numSge, then addr/length/lkey per SGE,
// then for an atomic its two raw uint64 operands; recv: wrId, numSge, then the SGEs.

import type { RecvWr, SendWr, Sge } from '../types.js';
import { ABI } from './abi.js';
import { sendOpcodeCode } from './codes.js';
import {
  describe,
  intError,
  invalid,
  isIntIn,
  MAX_ADDR,
  MAX_U32,
  MAX_WR_ID,
  outOfRange,
} from './validate.js';

function checkWrId(v: unknown): number {
  if (!isIntIn(v, 0, MAX_WR_ID)) throw intError('wrId', v, 0, MAX_WR_ID);
  return v;
}

// Total length of the last packSges call (a module slot: no tuple allocated per WR).
let lastTotal = 0;

function packSges(out: Float64Array, p: number, sgList: readonly Sge[], maxSge: number): number {
  if (sgList.length > maxSge)
    throw outOfRange(`sgList has ${sgList.length} entries, the queue allows ${maxSge}`);
  let total = 0;
  // Indexed, not for…of: until the function is optimized an iteration allocates an iterator
  // and a result per entry (≈ 100 B per post, seen by mux's steady-state allocation test).
  for (let i = 0; i < sgList.length; i++) {
    const sge = sgList[i] as Sge;
    if (sge === null || typeof sge !== 'object')
      throw invalid(`an sge must be { addr, length, lkey }, got ${describe(sge)}`);
    const { addr, length, lkey } = sge;
    // Inline checks, errors built only when thrown: no allocation per SGE.
    if (!isIntIn(addr, 0, MAX_ADDR)) throw intError('sge.addr', addr, 0, MAX_ADDR);
    if (!isIntIn(length, 0, MAX_U32)) throw intError('sge.length', length, 0, MAX_U32);
    if (!isIntIn(lkey, 0, MAX_U32)) throw intError('sge.lkey', lkey, 0, MAX_U32);
    out[p + ABI.SGE_ADDR] = addr;
    out[p + ABI.SGE_LENGTH] = length;
    out[p + ABI.SGE_LKEY] = lkey;
    p += ABI.SGE_WORDS;
    total += length;
  }
  lastTotal = total;
  return p;
}

/** Words one send WR may take: its SGEs, or an atomic's one SGE and its operands. */
export function sendWrWords(maxSge: number): number {
  return ABI.SEND_WR_HEADER_WORDS + ABI.SGE_WORDS * Math.max(maxSge, 1) + ABI.ATOMIC_OPERAND_WORDS;
}

const MAX_U64 = (1n << 64n) - 1n;

function checkOperand(name: string, v: unknown): bigint {
  if (typeof v !== 'bigint')
    throw invalid(`${name} must be a bigint in [0, 2^64), got ${describe(v)}`);
  if (v < 0n || v > MAX_U64) throw outOfRange(`${name} must be in [0, 2^64), got ${v}`);
  return v;
}

/** Where an atomic's operands go: a BigUint64Array over the same buffer as the WRs. */
export function operandView(wrs: Float64Array): BigUint64Array {
  return new BigUint64Array(wrs.buffer, wrs.byteOffset, wrs.length);
}

export function recvWrWords(maxSge: number): number {
  return ABI.RECV_WR_HEADER_WORDS + ABI.SGE_WORDS * maxSge;
}

/** Packs one send WR at `p`; returns the next offset. */
export function packSendWr(
  out: Float64Array,
  operands: BigUint64Array,
  p: number,
  wr: SendWr,
  maxSge: number,
  maxInline: number,
  maxMsg: number,
): number {
  if (wr === null || typeof wr !== 'object') throw invalid('a send work request must be an object');
  const wrId = checkWrId(wr.wrId);
  const opcode = sendOpcodeCode(wr.opcode);
  if (opcode < 0) throw invalid(`unknown opcode ${describe(wr.opcode)}`);
  const isRdma = opcode >= 2;
  const withImm = wr.opcode === 'SEND_WITH_IMM' || wr.opcode === 'RDMA_WRITE_WITH_IMM';
  const imm = wr.imm === undefined ? 0 : wr.imm;
  if (withImm && wr.imm === undefined) throw invalid(`${wr.opcode} needs imm`);
  if (!isIntIn(imm, 0, MAX_U32)) throw intError('imm', imm, 0, MAX_U32);
  let remoteAddr = 0;
  let rkey = 0;
  if (isRdma) {
    remoteAddr = wr.remoteAddr as number;
    rkey = wr.rkey as number;
    if (!isIntIn(remoteAddr, 0, MAX_ADDR))
      throw intError(`${wr.opcode} remoteAddr`, remoteAddr, 0, MAX_ADDR);
    if (!isIntIn(rkey, 0, MAX_U32)) throw intError(`${wr.opcode} rkey`, rkey, 0, MAX_U32);
  }
  const isInline = wr.inline === true;
  const isAtomic = opcode === ABI.OP_ATOMIC_CMP_AND_SWP || opcode === ABI.OP_ATOMIC_FETCH_AND_ADD;
  if (isInline && (opcode === ABI.OP_RDMA_READ || isAtomic))
    throw invalid(`${wr.opcode} cannot be inline`);
  out[p + ABI.SEND_WR_ID] = wrId;
  out[p + ABI.SEND_WR_OPCODE] = opcode;
  out[p + ABI.SEND_WR_FLAGS] =
    (wr.signaled === false ? 0 : ABI.FLAG_SIGNALED) |
    (isInline ? ABI.FLAG_INLINE : 0) |
    (wr.solicited === true ? ABI.FLAG_SOLICITED : 0);
  out[p + ABI.SEND_WR_IMM] = imm;
  out[p + ABI.SEND_WR_REMOTE_ADDR] = remoteAddr;
  out[p + ABI.SEND_WR_RKEY] = rkey;
  if (!Array.isArray(wr.sgList))
    throw invalid(`sgList must be an array of { addr, length, lkey }, got ${describe(wr.sgList)}`);
  out[p + ABI.SEND_WR_NUM_SGE] = wr.sgList.length;
  const next = packSges(out, p + ABI.SEND_WR_HEADER_WORDS, wr.sgList, maxSge);
  const total = lastTotal;
  if (isAtomic) {
    if (wr.sgList.length !== 1 || total !== ABI.ATOMIC_BYTES)
      throw invalid(
        `${wr.opcode} takes one SGE of ${ABI.ATOMIC_BYTES} bytes for the prior value, got ${wr.sgList.length} SGEs of ${total} bytes`,
      );
    operands[next] = checkOperand('compareAdd', wr.compareAdd);
    const cmp = opcode === ABI.OP_ATOMIC_CMP_AND_SWP;
    if (!cmp && wr.swap !== undefined) throw invalid('ATOMIC_FETCH_AND_ADD takes no swap');
    operands[next + 1] = cmp ? checkOperand('swap', wr.swap) : 0n;
    return next + ABI.ATOMIC_OPERAND_WORDS;
  }
  if (isInline && total > maxInline)
    throw outOfRange(`inline payload of ${total} bytes exceeds maxInlineData ${maxInline}`);
  if (total > maxMsg)
    throw outOfRange(`message of ${total} bytes exceeds the device's maximum ${maxMsg}`);
  return next;
}

/** Packs one receive WR at `p`; returns the next offset. */
export function packRecvWr(out: Float64Array, p: number, wr: RecvWr, maxSge: number): number {
  if (wr === null || typeof wr !== 'object')
    throw invalid('a receive work request must be an object');
  out[p + ABI.RECV_WR_ID] = checkWrId(wr.wrId);
  if (!Array.isArray(wr.sgList))
    throw invalid(`sgList must be an array of { addr, length, lkey }, got ${describe(wr.sgList)}`);
  out[p + ABI.RECV_WR_NUM_SGE] = wr.sgList.length;
  return packSges(out, p + ABI.RECV_WR_HEADER_WORDS, wr.sgList, maxSge);
}

/** One WR or a batch as a list, without allocating: a single WR goes into `slot`. */
export function asList<T>(wrs: T | readonly T[], slot: [T]): readonly T[] {
  if (Array.isArray(wrs)) return wrs;
  slot[0] = wrs as T;
  return slot;
}

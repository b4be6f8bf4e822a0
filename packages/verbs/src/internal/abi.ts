// The TypeScript mirror of native/abi.h: every number shared with the addon. The loader
// checks the addon's exported table against this one at load (checkAbi), so the two
// cannot drift apart unnoticed.
import { RdmaError } from '../errors.js';

export const ABI = {
  version: 4,
  EV_DOORBELL: 0,
  EV_QP_FATAL: 1,
  EV_CQ_ERR: 2,
  EV_SRQ_LIMIT: 3,
  EV_LINK: 4,
  EV_PORT: 5,
  EV_CQS_READY: 6,
  EV_QP_LAST_WQE: 7,
  CQ_READY_BATCH: 1024,
  POST_OK: 0,
  POST_EINVAL: 1,
  POST_ENOMEM: 2,
  POST_OTHER: 3,
  POST_BAD_INLINE: 4,
  POST_BUSY: 5,
  POST_RECORD_WORDS: 2,
  POST_REC_POSTED: 0,
  POST_REC_CODE: 1,
  QPS_RESET: 0,
  QPS_INIT: 1,
  QPS_RTR: 2,
  QPS_RTS: 3,
  QPS_ERR: 6,
  OP_SEND: 0,
  OP_SEND_WITH_IMM: 1,
  OP_RDMA_WRITE: 2,
  OP_RDMA_WRITE_WITH_IMM: 3,
  OP_RDMA_READ: 4,
  OP_ATOMIC_CMP_AND_SWP: 5,
  OP_ATOMIC_FETCH_AND_ADD: 6,
  OP_LAST: 6,
  FLAG_SIGNALED: 1,
  FLAG_INLINE: 2,
  SEND_WR_HEADER_WORDS: 7,
  RECV_WR_HEADER_WORDS: 2,
  SGE_WORDS: 3,
  ATOMIC_OPERAND_WORDS: 2,
  ATOMIC_BYTES: 8,
  WC_WORDS: 8,
  WC_WR_ID: 0,
  WC_STATUS: 1,
  WC_OPCODE: 2,
  WC_BYTE_LEN: 3,
  WC_IMM: 4,
  WC_QP_NUM: 5,
  WC_FLAGS: 6,
  WC_SRC_QP: 7,
  WC_FLAG_WITH_IMM: 2,
  WCO_SEND: 0,
  WCO_RDMA_WRITE: 1,
  WCO_RDMA_READ: 2,
  WCO_COMP_SWAP: 3,
  WCO_FETCH_ADD: 4,
  WCO_RECV: 128,
  WCO_RECV_RDMA_WITH_IMM: 129,
  LINK_WORDS: 11,
  LINK_OPCODE: 0,
  LINK_IMM: 1,
  LINK_REMOTE_ADDR: 2,
  LINK_RKEY: 3,
  LINK_LENGTH: 4,
  LINK_DST_SLOT: 5,
  LINK_DST_GEN: 6,
  LINK_SRC_QPN: 7,
  LINK_SRC_PID: 8,
  LINK_TOKEN: 9,
  LINK_HEAD: 10,
  LINK_DONE: 0,
  LINK_RNR: 1,
  LINK_TRANSPORT: 2,
  LINK_DISCARDED: 3,
  FAULT_BREAK_LINK: 0,
  FAULT_STALL_RECEIVER: 1,
  FAULT_DELAY: 2,
} as const;

/** Compares the addon's table with ABI; throws naming the first field that differs. */
export function checkAbi(native: Record<string, number>, where: string): void {
  const names = new Set([...Object.keys(ABI), ...Object.keys(native)]);
  for (const name of names) {
    const js = (ABI as Record<string, number>)[name];
    const cc = native[name];
    if (js !== cc) {
      throw new RdmaError(
        'ERR_RDMA_NATIVE_LOAD',
        `@rdmajs/verbs: the addon at ${where} does not match this JavaScript: ABI field ${name} is ${cc ?? 'missing'} natively and ${js ?? 'missing'} here; rebuild it (pnpm build) or reinstall the package`,
      );
    }
  }
}

// Names for the addon's numbers (all defined once, in abi.ts / native/abi.h).
import type { QpState, SendOpcode, WcOpcode } from '../types.js';
import { ABI } from './abi.js';

export const QP_STATE_CODE = {
  reset: ABI.QPS_RESET,
  init: ABI.QPS_INIT,
  rtr: ABI.QPS_RTR,
  rts: ABI.QPS_RTS,
  error: ABI.QPS_ERR,
} as const satisfies Record<QpState, number>;

export function qpStateName(code: number): QpState {
  switch (code) {
    case ABI.QPS_RESET:
      return 'reset';
    case ABI.QPS_INIT:
      return 'init';
    case ABI.QPS_RTR:
      return 'rtr';
    case ABI.QPS_RTS:
      return 'rts';
    default:
      return 'error';
  }
}

export const SEND_OPCODE_CODE: Record<SendOpcode, number> = {
  SEND: ABI.OP_SEND,
  SEND_WITH_IMM: ABI.OP_SEND_WITH_IMM,
  RDMA_WRITE: ABI.OP_RDMA_WRITE,
  RDMA_WRITE_WITH_IMM: ABI.OP_RDMA_WRITE_WITH_IMM,
  RDMA_READ: ABI.OP_RDMA_READ,
  ATOMIC_CMP_AND_SWP: ABI.OP_ATOMIC_CMP_AND_SWP,
  ATOMIC_FETCH_AND_ADD: ABI.OP_ATOMIC_FETCH_AND_ADD,
};

export function wcOpcodeName(code: number): WcOpcode {
  switch (code) {
    case ABI.WCO_RDMA_WRITE:
      return 'RDMA_WRITE';
    case ABI.WCO_RDMA_READ:
      return 'RDMA_READ';
    case ABI.WCO_COMP_SWAP:
      return 'COMP_SWAP';
    case ABI.WCO_FETCH_ADD:
      return 'FETCH_ADD';
    case ABI.WCO_RECV:
      return 'RECV';
    case ABI.WCO_RECV_RDMA_WITH_IMM:
      return 'RECV_RDMA_WITH_IMM';
    default:
      return 'SEND';
  }
}

// Names for the addon's numbers (all defined once, in abi.ts / native/abi.h).
import type { QpState, WcOpcode } from '../types.js';
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

/**
 * A send WR's opcode code, or -1 for anything else (inherited names such as 'toString'
 * included). A switch on the string: the post path called Object.hasOwn on the table per WR.
 */
export function sendOpcodeCode(name: unknown): number {
  switch (name) {
    case 'SEND':
      return ABI.OP_SEND;
    case 'SEND_WITH_IMM':
      return ABI.OP_SEND_WITH_IMM;
    case 'RDMA_WRITE':
      return ABI.OP_RDMA_WRITE;
    case 'RDMA_WRITE_WITH_IMM':
      return ABI.OP_RDMA_WRITE_WITH_IMM;
    case 'RDMA_READ':
      return ABI.OP_RDMA_READ;
    case 'ATOMIC_CMP_AND_SWP':
      return ABI.OP_ATOMIC_CMP_AND_SWP;
    case 'ATOMIC_FETCH_AND_ADD':
      return ABI.OP_ATOMIC_FETCH_AND_ADD;
    default:
      return -1;
  }
}

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

// Numeric codes shared with the native providers (ibverbs values).
import type { QpState, SendOpcode, WcOpcode } from '../types.js';

export const QP_STATE_CODE: Record<QpState, number> = {
  reset: 0,
  init: 1,
  rtr: 2,
  rts: 3,
  error: 6,
};

export function qpStateName(code: number): QpState {
  switch (code) {
    case 0:
      return 'reset';
    case 1:
      return 'init';
    case 2:
      return 'rtr';
    case 3:
      return 'rts';
    default:
      return 'error';
  }
}

export const SEND_OPCODE_CODE: Record<SendOpcode, number> = {
  SEND: 0,
  SEND_WITH_IMM: 1,
  RDMA_WRITE: 2,
  RDMA_WRITE_WITH_IMM: 3,
  RDMA_READ: 4,
};

export function wcOpcodeName(code: number): WcOpcode {
  switch (code) {
    case 1:
      return 'RDMA_WRITE';
    case 2:
      return 'RDMA_READ';
    case 128:
      return 'RECV';
    case 129:
      return 'RECV_RDMA_WITH_IMM';
    default:
      return 'SEND';
  }
}

export const WC_FLAG_WITH_IMM = 2;

export const POST_EINVAL = 1;
export const POST_ENOMEM = 2;
/** An inline SGE outside registered memory (refused: the copy would fault). */
export const POST_BAD_INLINE = 4;

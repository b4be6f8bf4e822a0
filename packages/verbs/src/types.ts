/** Plain data types of the verbs API (no behaviour). Names follow libibverbs. */

export type ProviderName = 'soft' | 'ibverbs';

/** Memory access flags, numerically equal to `enum ibv_access_flags`. */
export const Access = {
  LocalWrite: 1,
  RemoteWrite: 2,
  RemoteRead: 4,
  RemoteAtomic: 8,
} as const;

export type QpState = 'reset' | 'init' | 'rtr' | 'rts' | 'error';

export type SendOpcode =
  | 'SEND'
  | 'SEND_WITH_IMM'
  | 'RDMA_WRITE'
  | 'RDMA_WRITE_WITH_IMM'
  | 'RDMA_READ'
  | 'ATOMIC_CMP_AND_SWP'
  | 'ATOMIC_FETCH_AND_ADD';

/** `enum ibv_wc_status` names, in their numeric order (index = ibverbs value). */
export const WC_STATUSES = [
  'SUCCESS',
  'LOC_LEN_ERR',
  'LOC_QP_OP_ERR',
  'LOC_EEC_OP_ERR',
  'LOC_PROT_ERR',
  'WR_FLUSH_ERR',
  'MW_BIND_ERR',
  'BAD_RESP_ERR',
  'LOC_ACCESS_ERR',
  'REM_INV_REQ_ERR',
  'REM_ACCESS_ERR',
  'REM_OP_ERR',
  'RETRY_EXC_ERR',
  'RNR_RETRY_EXC_ERR',
  'LOC_RDD_VIOL_ERR',
  'REM_INV_RD_REQ_ERR',
  'REM_ABORT_ERR',
  'INV_EECN_ERR',
  'INV_EEC_STATE_ERR',
  'FATAL_ERR',
  'RESP_TIMEOUT_ERR',
  'GENERAL_ERR',
] as const;
export type WcStatus = (typeof WC_STATUSES)[number];

/** Completion opcodes; the receive side ones have the `RECV` prefix, as in ibverbs. */
export type WcOpcode =
  | 'SEND'
  | 'RDMA_WRITE'
  | 'RDMA_READ'
  | 'COMP_SWAP'
  | 'FETCH_ADD'
  | 'RECV'
  | 'RECV_RDMA_WITH_IMM';

/** One scatter/gather element: a range of registered memory. */
export interface Sge {
  addr: number;
  length: number;
  lkey: number;
}

export interface SendWr {
  /** Returned in the completion; an integer in [0, 2^53). */
  wrId: number;
  opcode: SendOpcode;
  sgList: readonly Sge[];
  /** Default true. Unsignaled WRs complete silently unless they fail. */
  signaled?: boolean;
  /** Copy the payload at post time; the lkey is not checked. */
  inline?: boolean;
  /**
   * IBV_SEND_SOLICITED: the receive completion of this SEND, SEND_WITH_IMM or
   * RDMA_WRITE_WITH_IMM wakes a receiver armed solicited-only
   * (`requestNotify({ solicitedOnly: true })`). Default false.
   */
  solicited?: boolean;
  /** Immediate data (uint32) for the *_WITH_IMM opcodes. */
  imm?: number;
  /** Remote address and key for RDMA_WRITE*, RDMA_READ and the atomics. */
  remoteAddr?: number;
  rkey?: number;
  /**
   * Atomics (one 8-byte SGE receives the prior value; `remoteAddr` 8-byte aligned, else the
   * responder fails it with REM_INV_REQ_ERR): the value to compare with (CMP_AND_SWP) or to
   * add (FETCH_AND_ADD, modulo 2^64), a bigint in [0, 2^64).
   */
  compareAdd?: bigint;
  /** ATOMIC_CMP_AND_SWP: the value stored when the target equals `compareAdd`. */
  swap?: bigint;
}

export interface RecvWr {
  wrId: number;
  sgList: readonly Sge[];
}

/** A work completion. `poll()` fills preallocated instances of this shape. */
export interface WorkCompletion {
  wrId: number;
  status: WcStatus;
  opcode: WcOpcode;
  byteLen: number;
  imm: number;
  /** True when `imm` carries immediate data. */
  withImm: boolean;
  qpNum: number;
  srcQp: number;
  vendorErr: number;
}

export interface QpCaps {
  maxSendWr: number;
  maxRecvWr: number;
  maxSendSge: number;
  maxRecvSge: number;
  maxInlineData: number;
}

/** Path options of an ibverbs connection (RTR). The soft provider refuses them. */
export interface RouteOptions {
  /** GRH hop limit, 1..255. Default 64. */
  hopLimit?: number;
  /** Service level, 0..15. Default 0. */
  sl?: number;
  /** GRH traffic class (DSCP << 2 | ECN), 0..255. Default 0. */
  trafficClass?: number;
}

export interface ConnectOptions extends RouteOptions {
  /** RNR retries before RNR_RETRY_EXC_ERR, 0..7; 7 = infinite (the specification). Default 7. */
  rnrRetry?: number;
  /**
   * Transport retries before RETRY_EXC_ERR, 0..7 (7 is seven retries; rxe alone treats it
   * as infinite). Default 6: a dead peer is detected within DEAD_PEER_BOUND_MS on every
   * provider.
   */
  retryCount?: number;
  /** Local ACK timeout exponent, 0..31: 4.096 µs × 2^timeout; 0 = infinite. Default 14. */
  timeout?: number;
  /** Encoded minimum RNR NAK timer, 0..31 (IB table; 0 = 655.36 ms). Default 12 (0.64 ms). */
  minRnrTimer?: number;
  /** Remote access this QP grants its peer (Access flags). Default all remote access. */
  access?: number;
}

export interface PortInfo {
  port: number;
  state: 'DOWN' | 'INIT' | 'ARMED' | 'ACTIVE';
  activeMtu: number;
  linkLayer: 'Ethernet' | 'InfiniBand' | 'Shared memory';
  lid: number;
  gids: string[];
  /** ibverbs: the GID table with indexes and types ('RoCE v2', 'IB/RoCE v1') */
  gidTable?: { index: number; gid: string; type: string }[];
}

export interface DeviceLimits {
  maxQp: number;
  maxQpWr: number;
  maxSge: number;
  maxCq: number;
  maxCqe: number;
  maxMr: number;
  /** 64-bit: exact as a bigint (2^64 − 1 means no limit). */
  maxMrSize: bigint;
  maxMsgSize: number;
  maxInlineData: number;
  maxSrq: number;
  maxSrqWr: number;
}

export interface DeviceInfo {
  name: string;
  provider: ProviderName;
  guid: string;
  ports: PortInfo[];
  limits: DeviceLimits;
}

/** Where a soft device's TCP link listens (`device.listen()`): the address peers dial. */
export interface LinkListener {
  host: string;
  port: number;
}

/**
 * How a peer reaches one soft QP over the TCP link (in its endpoint). `key` is that QP's
 * link key (base64url, derived from a secret that never leaves its device): whoever holds
 * it may speak to this QP — and only to this QP — over the link, so endpoints are exchanged
 * over an authenticated channel, as RDMA endpoints always are.
 */
export interface LinkAddress extends LinkListener {
  key: string;
  /** The link protocol the device speaks (a peer of another version is refused at connect). */
  version: number;
}

/** What a soft QP tells its peer: where its device's shared segment and doorbell are. */
export interface SoftEndpoint {
  provider: 'soft';
  transport: 'shm';
  qpn: number;
  psn: number;
  bootId: string;
  pid: number;
  segFd: number;
  bellFd: number;
  nonce: number;
  slot: number;
  gen: number;
  /** Present once the device listens: peers on other hosts connect over the TCP link. */
  tcp?: LinkAddress;
}

/** What an ibverbs QP tells its peer (RoCE v2 or InfiniBand); see `ibverbsEndpoint()`. */
export interface IbvEndpoint {
  provider: 'ibverbs';
  transport: 'roce' | 'ib';
  qpn: number;
  psn: number;
  lid: number;
  /** GID as ibv_devinfo prints it (8 groups of 4 hex digits); all zero without a GRH */
  gid: string;
  gidIndex: number;
  port: number;
  /** ibv_mtu enum of the path (1 = 256 B … 5 = 4096 B); the smaller side wins */
  mtu: number;
  /** RDMA READs this QP accepts in flight: the peer's initiator depth is capped by it */
  maxRdAtomic: number;
}

/** What a peer needs to connect to a QP; JSON-serialisable, exchanged out of band. */
export type Endpoint = SoftEndpoint | IbvEndpoint;

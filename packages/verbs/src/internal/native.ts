// Loads the addon and explains itself when it cannot.
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RdmaError, RdmaSystemError } from '../errors.js';
import type { DeviceLimits } from '../types.js';
import { type ABI, checkAbi } from './abi.js';

/** What regMr returns (native/records.h): soft has one key, so there lkey = rkey. */
export interface NativeMr {
  handle: number;
  addr: number;
  lkey: number;
  rkey: number;
}

/** What allocMr returns: the registration and the memory it covers. */
export interface NativeAllocatedMr extends NativeMr {
  buffer: ArrayBuffer;
}

/** modifyQp to error or reset: no attributes. */
export type QpsPlain = typeof ABI.QPS_ERR | typeof ABI.QPS_RESET;

/** The handle-based surface every provider's native device implements. */
export interface NativeDevice {
  close(): void;
  allocMr(length: number, access: number): NativeAllocatedMr;
  regMr(buffer: ArrayBuffer, offset: number, length: number, access: number): NativeMr;
  deregMr(handle: number): void;
  createCq(capacity: number): number;
  destroyCq(handle: number): void;
  cqCapacity(handle: number): number;
  /**
   * `armIfEmpty` 1 (soft): finding none, it arms for the next completion as armCq(handle, 0)
   * would, in the same crossing (ibverbs ignores it).
   */
  pollCq(handle: number, out: Float64Array, max: number, armIfEmpty?: number): number;
  cqCount(handle: number): number;
  /**
   * Soft: a wait's spin in one crossing. Returns the count once it is non-zero or after `us`
   * µs (0..10^6: 0 is one look); with `yieldFirst` 1 and none there at first, it gives the
   * core up once (a same-host peer may be queued on it), and returns −(count + 1) when that
   * yield took long (another process's time slice). ibverbs has none: its waits spin in JS
   * on cqCount.
   */
  spinCq?(handle: number, us: number, yieldFirst: number): number;
  /** Arms for the next completion, or (solicitedOnly 1) the next solicited or failed one; returns the count already there. */
  armCq(handle: number, solicitedOnly: number): number;
  createSrq(maxWr: number, maxSge: number): number;
  destroySrq(handle: number): void;
  /** Returns the POST_* code; the post record says how many WRs went in (postSend). */
  postSrqRecv(handle: number, wrs: Float64Array, count: number): number;
  armSrqLimit(handle: number, limit: number): void;
  createQp(
    sendCq: number,
    recvCq: number,
    srq: number,
    maxSendWr: number,
    maxRecvWr: number,
    maxSendSge: number,
    maxRecvSge: number,
    maxInline: number,
  ): number;
  destroyQp(handle: number): void;
  qpState(handle: number): number;
  /**
   * Returns 0 or the errno of the failed transition. init/rtr/rts take a per-provider
   * attribute object (SoftNativeDevice, IbvNativeDevice).
   */
  modifyQp(handle: number, state: QpsPlain): number;
  /**
   * Posts the first `count` WRs packed in `wrs` (encode.ts). Returns the POST_* code and
   * writes the device's post record (abi.ts: POST_REC_POSTED = how many WRs went in, those
   * before the first refused one; POST_REC_CODE = the code): nothing is allocated per post.
   * `start`: the word of `wrs` where the first WR begins (0, or a SendWrList's record).
   */
  postSend(handle: number, wrs: Float64Array, count: number, start: number): number;
  /** As postSend. */
  postRecv(handle: number, wrs: Float64Array, count: number): number;
}

/** What a soft endpoint carries of its device. */
export interface SoftEndpointBase {
  pid: number;
  segFd: number;
  bellFd: number;
  bootId: string;
  nonce: number;
}

/** A soft QP: its number, and the slot and generation of its shared descriptor. */
export interface SoftQpInfo {
  qpn: number;
  slot: number;
  gen: number;
}

export interface SoftInitAttr {
  access: number;
}

/** The peer's shared-memory endpoint. */
export interface SoftRtrAttr {
  pid: number;
  segFd: number;
  bellFd: number;
  slot: number;
  gen: number;
  qpn: number;
  nonce: number;
  minRnrTimer: number;
}

export interface RtsAttr {
  timeout: number;
  retryCount: number;
  rnrRetry: number;
}

/** The peer QP a soft QP reaches over the TCP link (from its endpoint). */
export interface SoftLinkPeer {
  pid: number;
  slot: number;
  gen: number;
  qpn: number;
  minRnrTimer: number;
}

/** The soft provider adds shared-memory endpoints, fault injection and the TCP link. */
export interface SoftNativeDevice extends NativeDevice {
  qpInfo(handle: number): SoftQpInfo;
  modifyQp(handle: number, state: QpsPlain): number;
  modifyQp(handle: number, state: typeof ABI.QPS_INIT, attr: SoftInitAttr): number;
  modifyQp(handle: number, state: typeof ABI.QPS_RTR, attr: SoftRtrAttr): number;
  modifyQp(handle: number, state: typeof ABI.QPS_RTS, attr: RtsAttr): number;
  endpointBase(): SoftEndpointBase;
  inject(handle: number, kind: number, value: number): void;
  /** Binds a QP in INIT to a peer QP reached over the TCP link; an errno (0: now RTR). */
  toRtrLink(handle: number, peer: SoftLinkPeer): number;
  /**
   * The next WR for the wire into `hdr` (LINK_* words) and its payload into
   * `frame[offset..]`: a LINK_TAKE_* code (LINK_TAKE_LAST: taken, and no other one now).
   */
  /**
   * `cap`: payload bytes it may put at `offset` at most (default: the rest of `frame`).
   * Inputs in hdr's LINK_IN_* words, zeroed by every call (words: a seventh argument makes
   * node-addon-api allocate per call): LINK_IN_REQ_ID (> 0) puts the request header naming it
   * at `offset - REQ_HEADER` too (not with `defer`); LINK_IN_SEND_FD (the socket's descriptor
   * + 1) with it: when it took the last WR there is now and the WR's length is at most
   * LINK_IN_SEND_MAX, `frame[0, its end)` is sent to that socket in this same call
   * (LINK_IN_SETTLES 1: linkSend's `settles` alike); hdr[LINK_SENT] says what the kernel
   * took, -1 when nothing was sent.
   */
  linkTake(
    handle: number,
    hdr: Float64Array,
    frame: Uint8Array,
    offset: number,
    cap?: number,
    defer?: boolean,
  ): number;
  /**
   * `defer`: a WRITE/SEND's payload stays in registered memory; then linkWrite writes the
   * header (`frame[0, headerBytes)`) and that payload to socket `fd` directly, copies what
   * the kernel did not take into `frame` at its place, and returns the bytes written (-1:
   * nothing was taken deferred).
   */
  linkWrite(handle: number, fd: number, frame: Uint8Array, headerBytes: number): number;
  /**
   * One non-blocking send of `buf[offset, offset + length)` to socket `fd` (nothing of that
   * connection queued in node): the bytes the kernel took, or −errno. `settles`: they are
   * the last the link's flush was owed for (linkFlushSoon(false) with them, no crossing).
   */
  linkSend(fd: number, buf: Uint8Array, offset: number, length: number, settles?: boolean): number;
  /**
   * The peer's answer: `answer` is outcome | status << LINK_DONE_STATUS_SHIFT | rnrTimer <<
   * LINK_DONE_RNR_SHIFT (six arguments at most: node-addon-api allocates past that); READ or
   * atomic data are `data[offset, offset + length)`. True when WRs are ready to take now.
   */
  linkDone(
    handle: number,
    token: number,
    answer: number,
    data?: Uint8Array,
    offset?: number,
    length?: number,
  ): boolean;
  /** bytes moved on the connection carrying this QP's frames: its ACK timer restarts */
  linkProgress(handle: number): void;
  /**
   * Runs the request whose fields are in `record` (RESPOND_* words) against this device's
   * QP, its payload being `buf[offset, offset + length)` (a READ's data is written there);
   * writes the answer into the record and returns its LINK_* outcome. The answer is owed to
   * the peer: the link's flush is called after this turn's I/O, as linkFlushSoon() does.
   */
  respond(record: Float64Array, buf: Uint8Array, offset: number, length: number): number;
  /**
   * The common request in one crossing: the frame `frame[FRAME_IN_OFFSET, + FRAME_IN_LENGTH)`
   * is parsed and checked natively and, when it is a SEND or WRITE to the bound QP (FRAME_IN_SLOT,
   * FRAME_IN_GEN) from the source QP (FRAME_IN_SRC_PID, FRAME_IN_SRC_QPN) carrying token
   * FRAME_IN_TOKEN (≠ 0), run as respond() runs it; its answer's header goes to
   * `out[FRAME_IN_OUT_AT, + LINK_RES_HEADER)`, the answer and the request's fields to the record
   * (FRAME_* words). Returns its LINK_* outcome, or FRAME_NOT_RUN with nothing done.
   */
  respondFrame(record: Float64Array, frame: Uint8Array, out: Uint8Array): number;
  /**
   * Puts `buf[offset, offset + length)` at bytes `[at, at + length)` of the RDMA WRITE the
   * record names (RESPOND_PLACED: its whole length) after respond's checks for its whole
   * range; false, with nothing written, when one fails. `length` 0: the checks only.
   */
  place(record: Float64Array, buf: Uint8Array, offset: number, length: number, at: number): boolean;
  /** The TCP link's `flush` (set once, by its listener): what linkFlushSoon() calls. */
  onLinkFlush(flush: () => void): void;
  /**
   * Calls the link's flush once, after this turn of the loop's I/O and the wake-ups it caused;
   * `false`: not any more (what it would write went already, with a request).
   */
  linkFlushSoon(owed?: boolean): void;
  /**
   * Takes now the wake-up respond(), respondFrame() or linkDone() owe this device's own CQs
   * (otherwise delivered after this turn's I/O): returns how many CQs are ready, their
   * handles in the handler's ready array, for the caller to notify (EV_CQS_READY); 0 when
   * none, or when it delivered them itself (more than CQ_READY_BATCH). Async events go to the
   * handler. The link calls it once a read's frames ran.
   */
  wakeOwed(): number;
  /**
   * Rings now the peers' doorbells this device's posts owe (they ring once the JS that
   * posted is over): for a process that exits before its loop turns again.
   */
  flushDoorbells(): void;
}

/** The route an ibverbs QP uses: what its endpoint tells the peer. */
export interface IbvRoute {
  port: number;
  lid: number;
  /** -1 on InfiniBand without a GRH */
  gidIndex: number;
  gid: string;
  /** ibv_mtu enum: 1 = 256 B … 5 = 4096 B */
  mtu: number;
  linkLayer: 'Ethernet' | 'InfiniBand';
  /** RDMA READs a QP of this device accepts in flight as responder (max_dest_rd_atomic) */
  maxRdAtomic: number;
}

/** An ibverbs QP: its number, its send PSN and the capacities the device granted. */
export interface IbvQpInfo {
  qpn: number;
  psn: number;
  maxSendWr: number;
  maxRecvWr: number;
  maxInlineData: number;
}

export interface IbvInitAttr {
  access: number;
  port: number;
}

/** The peer's endpoint and this QP's path towards it. */
export interface IbvRtrAttr {
  destQpn: number;
  rqPsn: number;
  dlid: number;
  /** the peer's GID as four big-endian 32-bit words; all zero: no GRH */
  gidWords: readonly [number, number, number, number];
  /** ibv_mtu enum */
  mtu: number;
  minRnrTimer: number;
  port: number;
  /** -1: none (InfiniBand without a GRH) */
  sgidIndex: number;
  hopLimit: number;
  sl: number;
  trafficClass: number;
}

export interface IbvRtsAttr extends RtsAttr {
  /** READs the peer's responder accepts in flight (its endpoint's maxRdAtomic) */
  maxRdAtomic: number;
}

export interface IbvNativeDevice extends NativeDevice {
  qpInfo(handle: number): IbvQpInfo;
  modifyQp(handle: number, state: QpsPlain): number;
  modifyQp(handle: number, state: typeof ABI.QPS_INIT, attr: IbvInitAttr): number;
  modifyQp(handle: number, state: typeof ABI.QPS_RTR, attr: IbvRtrAttr): number;
  modifyQp(handle: number, state: typeof ABI.QPS_RTS, attr: IbvRtsAttr): number;
  /** The route of QPs on `port` using GID `gidIndex` (defaults: the device's first ACTIVE port, its RoCE v2 IPv4 GID). */
  routeInfo(port?: number, gidIndex?: number): IbvRoute;
}

export interface IbvPortStatus {
  port: number;
  state: number;
  activeMtu: number;
  linkLayer: 'Ethernet' | 'InfiniBand';
  lid: number;
  maxMsgSize: number;
  gids: { index: number; gid: string; type: string }[];
}

export interface IbvDeviceStatus {
  name: string;
  guid: string;
  ports: IbvPortStatus[];
  /** The device's limits; the message size is per port (maxMsgSize above). */
  limits: Omit<DeviceLimits, 'maxMsgSize' | 'maxMrSize'> & {
    maxQpRdAtom: number;
    maxMrSize: number | bigint;
  };
}

/** What the ibverbs provider can offer on this host; `reason` says why not, when not. */
export interface IbvStatus {
  compiled: boolean;
  reason?: string;
  devices: IbvDeviceStatus[];
}

export interface SoftLimits {
  maxQp: number;
  maxQpWr: number;
  maxSge: number;
  maxCqe: number;
  maxMr: number;
  maxMrSize: number | bigint;
  maxMsgSize: number;
  maxInlineData: number;
  maxSrqWr: number;
  bootId: string;
}

type OnEvent = (kind: number, handle: number) => void;

interface Addon {
  /**
   * `ready` (CQ_READY_BATCH entries) receives the handles of CQs an EV_CQS_READY names;
   * `post` (POST_RECORD_WORDS) is the post record every post of this device writes.
   */
  SoftDevice: new (
    onEvent: OnEvent,
    ready: Uint32Array,
    post: Uint32Array,
  ) => SoftNativeDevice;
  /** Present when the addon was compiled with libibverbs headers. */
  IbvDevice?: new (
    name: string,
    onEvent: OnEvent,
    post: Uint32Array,
  ) => IbvNativeDevice;
  ibvStatus(): IbvStatus;
  setErrorClass(cls: unknown): void;
  softLimits(): SoftLimits;
  /** The contract table of native/abi.h, checked against abi.ts at load. */
  abi(): Record<string, number>;
}

let addon: Addon | undefined;

export function loadAddon(): Addon {
  if (addon) return addon;
  const root = dirname(dirname(dirname(fileURLToPath(import.meta.url))));
  const require = createRequire(import.meta.url);
  const tried = [
    join(root, 'build', 'Release', 'rdmajs_verbs.node'),
    join(root, 'build', 'Debug', 'rdmajs_verbs.node'),
  ];
  const failures: string[] = [];
  for (const path of tried) {
    try {
      const loaded = require(path) as Addon;
      checkAbi(typeof loaded.abi === 'function' ? loaded.abi() : {}, path);
      loaded.setErrorClass(RdmaSystemError);
      addon = loaded;
      return addon;
    } catch (err) {
      failures.push(`${path}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  throw new RdmaError(
    'ERR_RDMA_NATIVE_LOAD',
    `@rdmajs/verbs: no native addon loads on ${platform()}-${arch()} (Node ${process.version}). ` +
      `Tried:\n  ${failures.join('\n  ')}\nBuild it with \`pnpm build\` (needs python3, make and g++); ` +
      'the soft provider is part of that same addon.',
  );
}

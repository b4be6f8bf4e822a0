import { EventEmitter } from 'node:events';
import type { CompletionQueue } from './CompletionQueue.js';
import { RdmaError, RdmaSystemError } from './errors.js';
import {
  POST_BAD_INLINE,
  POST_EINVAL,
  POST_ENOMEM,
  QP_STATE_CODE,
  qpStateName,
} from './internal/codes.js';
import { asList, packRecvWr, packSendWr, recvWrWords, sendWrWords } from './internal/encode.js';
import { checkIbvEndpoint, ibvEndpoint } from './internal/ibvEndpoint.js';
import { Resource } from './internal/lifecycle.js';
import type {
  IbvRoute,
  NativeDevice,
  SoftEndpointBase,
  SoftNativeDevice,
} from './internal/native.js';
import type { LinkAddress, LinkClient } from './internal/TcpLink.js';
import { invalid, optInt } from './internal/validate.js';
import type { SharedReceiveQueue } from './SharedReceiveQueue.js';
import {
  Access,
  type ConnectOptions,
  type Endpoint,
  type QpCaps,
  type QpState,
  type RecvWr,
  type SendWr,
} from './types.js';

/** Faults the soft provider can inject, for tests. */
export type Fault =
  | { type: 'break-qp' }
  | { type: 'break-link' }
  | { type: 'stall-receiver'; on: boolean }
  | { type: 'delay'; ms: number };

export type QpAsyncEvent = { type: 'QP_FATAL'; error: RdmaError };

/** @internal what the device hands a QP */
export interface QpContext {
  native: NativeDevice;
  provider: 'soft' | 'ibverbs';
  /** soft: the device's shared-memory endpoint and its link/fault surface */
  soft?: { native: SoftNativeDevice; endpointBase: SoftEndpointBase };
  /** ibverbs: port, LID, GID and MTU this device's QPs use */
  route?: IbvRoute;
  maxMsgSize: number;
  /** live objects by native handle, for routing async events */
  qps: Map<number, QueuePair>;
  srqs: Map<number, SharedReceiveQueue>;
  /** Use the TCP link even for peers on this host (soft, for tests). */
  preferTcp: boolean;
  /** This device's link listener, once `listen()` resolved. */
  linkAddress: () => LinkAddress | undefined;
  linkClient: (address: LinkAddress) => LinkClient;
  /** True when `cq` was created by this device (QPs may only use their device's CQs). */
  ownsCq: (cq: CompletionQueue) => boolean;
}

const ERRNO_NAMES: Record<number, string> = {
  1: 'EPERM',
  12: 'ENOMEM',
  13: 'EACCES',
  16: 'EBUSY',
  22: 'EINVAL',
  110: 'ETIMEDOUT',
};

const ALL_REMOTE = Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic;

/**
 * A reliable-connected queue pair with the verbs state machine
 * reset → init → rtr → rts, and error from any state (reset again to reuse).
 */
export class QueuePair extends Resource {
  readonly qpn: number;
  readonly caps: QpCaps;
  readonly sendCq: CompletionQueue;
  readonly recvCq: CompletionQueue;
  readonly srq: SharedReceiveQueue | undefined;
  readonly events = new EventEmitter();
  readonly #ctx: QpContext;
  readonly #handle: number;
  /** soft: slot and generation of the QP's shared descriptor */
  readonly #slot: number;
  readonly #gen: number;
  /** ibverbs: the initial packet sequence number of this QP's send queue */
  readonly #psn: number;
  readonly #sendScratch: Float64Array;
  readonly #recvScratch: Float64Array;
  readonly #one: [SendWr | RecvWr] = [undefined as unknown as SendWr];
  #link: LinkClient | undefined;
  /** ibverbs: READs the peer's responder accepts in flight (from its endpoint) */
  #peerRdAtomic = 1;
  #linkHdr: Float64Array | undefined;
  #linkPayload = new Uint8Array(0);

  /** @internal */
  constructor(
    parent: Resource,
    ctx: QpContext,
    handle: number,
    caps: QpCaps,
    sendCq: CompletionQueue,
    recvCq: CompletionQueue,
    srq: SharedReceiveQueue | undefined,
  ) {
    super(parent);
    this.#ctx = ctx;
    this.#handle = handle;
    const [qpn, slot, gen, sendWr, recvWr, inline] = ctx.native.qpInfo(handle);
    // ibverbs reports what the device granted: the real ring sizes are the capacity.
    this.caps =
      sendWr === undefined
        ? caps
        : {
            ...caps,
            maxSendWr: sendWr,
            maxRecvWr: srq ? 0 : (recvWr ?? caps.maxRecvWr),
            maxInlineData: inline ?? caps.maxInlineData,
          };
    this.sendCq = sendCq;
    this.recvCq = recvCq;
    this.srq = srq;
    this.qpn = qpn;
    // qpInfo is [qpn, slot, gen] on soft and [qpn, psn, 0, caps…] on ibverbs.
    this.#slot = ctx.route ? 0 : slot;
    this.#gen = gen;
    this.#psn = ctx.route ? slot : 0;
    this.#sendScratch = new Float64Array(this.caps.maxSendWr * sendWrWords(caps.maxSendSge));
    this.#recvScratch = new Float64Array(
      Math.max(this.caps.maxRecvWr, 1) * recvWrWords(caps.maxRecvSge),
    );
    sendCq.use(1);
    recvCq.use(1);
    srq?.use(1);
    ctx.qps.set(handle, this);
  }

  get state(): QpState {
    this.assertOpen();
    return qpStateName(this.#ctx.native.qpState(this.#handle));
  }

  /** What the peer needs to connect to this QP (JSON-serialisable). */
  endpoint(): Endpoint {
    this.assertOpen();
    if (this.#ctx.route) return ibvEndpoint(this.#ctx.route, this.qpn, this.#psn);
    const base = this.#softCtx().endpointBase;
    return {
      provider: this.#ctx.provider,
      transport: 'shm',
      qpn: this.qpn,
      psn: 0,
      bootId: base.bootId,
      pid: base.pid,
      segFd: base.segFd,
      bellFd: base.bellFd,
      nonce: base.nonce,
      slot: this.#slot,
      gen: this.#gen,
      ...(this.#ctx.linkAddress() ? { tcp: this.#ctx.linkAddress() } : {}),
    };
  }

  /** reset → init. `access`: remote access granted to the peer (default all). */
  toInit(options: { access?: number } = {}): void {
    this.#modify('init', optInt('access', options.access, 0, 15, ALL_REMOTE));
  }

  /** init → rtr, bound to the remote endpoint. */
  toRtr(remote: Endpoint, options: { minRnrTimer?: number } = {}): void {
    const minRnr = optInt('minRnrTimer', options.minRnrTimer, 0, 31, 12);
    if (this.#ctx.route) {
      const ep = checkIbvEndpoint(remote);
      this.#modify('rtr', ep.qpn, ep.psn, ep.lid, ...ep.gidWords, ep.mtu, minRnr);
      this.#peerRdAtomic = ep.maxRdAtomic;
      return;
    }
    const soft = this.#softCtx();
    const base = soft.endpointBase;
    if (
      remote !== null &&
      typeof remote === 'object' &&
      (this.#ctx.preferTcp || remote.bootId !== base.bootId)
    ) {
      const ep = checkEndpoint(remote, this.#ctx.provider, undefined);
      const tcp = (remote as { tcp?: LinkAddress }).tcp;
      if (
        !tcp ||
        typeof tcp.host !== 'string' ||
        tcp.host === '' ||
        !Number.isInteger(tcp.port) ||
        tcp.port < 1 ||
        tcp.port > 65535
      ) {
        throw new RdmaError(
          'ERR_RDMA_UNREACHABLE',
          'the remote soft endpoint is on another host (or the TCP link was chosen) and does not listen: call `await device.listen()` on its device first',
        );
      }
      this.assertOpen();
      const link = this.#ctx.linkClient(tcp); // before the transition: it may throw
      const rc = soft.native.toRtrLink(this.#handle, ep.pid, ep.slot, ep.gen, ep.qpn, minRnr);
      if (rc !== 0) throw this.#transitionError(this.state, 'rtr', rc);
      this.#link = link;
      this.#linkHdr ??= new Float64Array(10);
      return;
    }
    const ep = checkEndpoint(remote, this.#ctx.provider, base.bootId);
    this.#link = undefined;
    this.#modify('rtr', ep.pid, ep.segFd, ep.bellFd, ep.slot, ep.gen, ep.qpn, minRnr, ep.nonce);
  }

  /** rtr → rts. */
  toRts(options: { timeout?: number; retryCount?: number; rnrRetry?: number } = {}): void {
    const timeout = optInt('timeout', options.timeout, 0, 31, 14);
    const retry = optInt('retryCount', options.retryCount, 0, 7, 7);
    const rnr = optInt('rnrRetry', options.rnrRetry, 0, 7, 7);
    if (this.#ctx.route) this.#modify('rts', timeout, retry, rnr, this.#peerRdAtomic);
    else this.#modify('rts', timeout, retry, rnr);
  }

  /** Any state → error: outstanding work is flushed with WR_FLUSH_ERR. */
  toError(): void {
    this.#modify('error');
  }

  /** Any state → reset: queues are emptied without completions; the QP can be reused. */
  reset(): void {
    this.#link = undefined;
    this.#modify('reset');
  }

  /** Walks reset → init → rtr → rts in one call. */
  connect(remote: Endpoint, options: ConnectOptions = {}): void {
    if (this.state === 'reset')
      this.toInit(options.access === undefined ? {} : { access: options.access });
    this.toRtr(
      remote,
      options.minRnrTimer === undefined ? {} : { minRnrTimer: options.minRnrTimer },
    );
    const rts: { timeout?: number; retryCount?: number; rnrRetry?: number } = {};
    if (options.timeout !== undefined) rts.timeout = options.timeout;
    if (options.retryCount !== undefined) rts.retryCount = options.retryCount;
    if (options.rnrRetry !== undefined) rts.rnrRetry = options.rnrRetry;
    this.toRts(rts);
  }

  /**
   * Posts one or more send WRs. The batch is validated whole before anything is posted.
   * A full send queue throws ERR_RDMA_QUEUE_FULL with `posted` = how many went in.
   */
  postSend(wrs: SendWr | readonly SendWr[]): void {
    this.assertOpen();
    const list = asList(wrs, this.#one as [SendWr]);
    const n = Math.min(list.length, this.caps.maxSendWr);
    let p = 0;
    for (let i = 0; i < n; i++) {
      p = packSendWr(
        this.#sendScratch,
        p,
        list[i] as SendWr,
        this.caps.maxSendSge,
        this.caps.maxInlineData,
        this.#ctx.maxMsgSize,
      );
    }
    const rc = this.#ctx.native.postSend(this.#handle, this.#sendScratch, n);
    if (this.#link) this.pumpLink();
    if (rc !== 0) throw postError(rc, 'send', this.state);
    if (list.length > n) throw postError((n << 8) | POST_ENOMEM, 'send', 'rts');
  }

  /** Posts one or more receive WRs (allowed from init on). */
  postRecv(wrs: RecvWr | readonly RecvWr[]): void {
    this.assertOpen();
    if (this.srq)
      throw new RdmaError(
        'ERR_RDMA_INVALID_STATE',
        'this QP receives through a shared receive queue; post there',
      );
    const list = asList(wrs, this.#one as [RecvWr]);
    const n = Math.min(list.length, this.caps.maxRecvWr);
    let p = 0;
    for (let i = 0; i < n; i++)
      p = packRecvWr(this.#recvScratch, p, list[i] as RecvWr, this.caps.maxRecvSge);
    const rc = this.#ctx.native.postRecv(this.#handle, this.#recvScratch, n);
    if (rc !== 0) throw postError(rc, 'receive', this.state);
    if (list.length > n) throw postError((n << 8) | POST_ENOMEM, 'receive', 'rts');
  }

  /** Test hook: injects a fault (soft provider; ibverbs supports only break-qp). */
  injectFault(fault: Fault): void {
    this.assertOpen();
    if (fault.type === 'break-qp') {
      this.toError();
      return;
    }
    const soft = this.#ctx.soft?.native;
    if (!soft) throw invalid(`fault ${fault.type} needs the soft provider`);
    if (fault.type === 'break-link') soft.inject(this.#handle, 0, 0);
    else if (fault.type === 'stall-receiver') soft.inject(this.#handle, 1, fault.on ? 1 : 0);
    else if (fault.type === 'delay') {
      if (!(fault.ms >= 0)) throw invalid('delay ms must be >= 0');
      soft.inject(this.#handle, 2, fault.ms);
    } else throw invalid(`unknown fault ${(fault as { type: string }).type}`);
  }

  on(event: 'asyncEvent', listener: (e: QpAsyncEvent) => void): this {
    this.events.on(event, listener);
    return this;
  }

  /** @internal Sends what the native side has ready for the TCP link (one WR in flight). */
  pumpLink(): void {
    const link = this.#link;
    const hdr = this.#linkHdr;
    const soft = this.#ctx.soft?.native;
    if (!link || !hdr || !soft || this.closed) return;
    for (;;) {
      const r = soft.linkTake(this.#handle, hdr, this.#linkPayload);
      if (r < 0) {
        this.#linkPayload = new Uint8Array(-r); // grows once to the largest message
        continue;
      }
      if (r === 0) return;
      const isRead = hdr[0] === 4;
      const payload = isRead ? undefined : this.#linkPayload.subarray(0, hdr[4] as number);
      const token = hdr[9] as number;
      link.send(hdr, payload, (outcome, status, rnrTimer, data) => {
        if (this.closed) return;
        soft.linkDone(this.#handle, token, outcome, status, rnrTimer, data);
        this.pumpLink();
      });
      return;
    }
  }

  /** @internal */
  onFatal(): void {
    this.events.emit('asyncEvent', {
      type: 'QP_FATAL',
      error: new RdmaError(
        'ERR_RDMA_INVALID_STATE',
        `QP ${this.qpn} was moved to error (${this.#ctx.provider === 'soft' ? 'by its peer' : 'fatal async event from the device'})`,
      ),
    } satisfies QpAsyncEvent);
  }

  #softCtx(): { native: SoftNativeDevice; endpointBase: SoftEndpointBase } {
    const soft = this.#ctx.soft;
    if (!soft) throw new RdmaError('ERR_RDMA_SYSTEM', 'internal: not a soft device');
    return soft;
  }

  #modify(to: QpState, ...args: number[]): void {
    this.assertOpen();
    const from = this.state;
    const rc = this.#ctx.native.modifyQp(this.#handle, QP_STATE_CODE[to], ...args);
    if (rc !== 0) throw this.#transitionError(from, to, rc);
  }

  #transitionError(from: QpState, to: QpState, rc: number): RdmaSystemError {
    const name = ERRNO_NAMES[rc] ? ` ${ERRNO_NAMES[rc]}` : '';
    return new RdmaSystemError(
      'ibv_modify_qp',
      rc,
      `cannot move QP ${this.qpn} from ${from} to ${to} (errno ${rc}${name})`,
      'ERR_RDMA_INVALID_STATE',
    );
  }

  protected kind(): string {
    return 'queue pair';
  }

  protected release(): void {
    this.#ctx.native.destroyQp(this.#handle);
    this.#ctx.qps.delete(this.#handle);
    this.sendCq.use(-1);
    this.recvCq.use(-1);
    this.srq?.use(-1);
  }
}

interface SoftEndpoint {
  pid: number;
  segFd: number;
  bellFd: number;
  slot: number;
  gen: number;
  qpn: number;
  nonce: number;
}

function checkEndpoint(
  remote: Endpoint,
  provider: string,
  bootId: string | undefined,
): SoftEndpoint {
  if (remote === null || typeof remote !== 'object')
    throw invalid('remote endpoint must be an object');
  if (remote.provider !== provider) {
    throw invalid(
      `remote endpoint is of provider ${String(remote.provider)}, this QP is ${provider}`,
    );
  }
  if (bootId !== undefined && remote.bootId !== bootId) {
    throw new RdmaError(
      'ERR_RDMA_UNREACHABLE',
      'the remote soft endpoint is on another host; the soft provider connects peers on the same host (shared memory) only',
    );
  }
  const e = remote as unknown as Record<string, unknown>;
  for (const k of ['pid', 'segFd', 'bellFd', 'slot', 'gen', 'qpn', 'nonce']) {
    if (typeof e[k] !== 'number' || !Number.isInteger(e[k]) || (e[k] as number) < 0)
      throw invalid(`remote endpoint lacks ${k}`);
  }
  return e as unknown as SoftEndpoint;
}

function postError(rc: number, what: string, state: QpState): RdmaError {
  const index = rc >> 8;
  const code = rc & 0xff;
  if (code === POST_EINVAL) {
    return Object.assign(
      new RdmaError('ERR_RDMA_INVALID_STATE', `cannot post a ${what} in state ${state}`),
      { posted: index },
    );
  }
  if (code === POST_ENOMEM) {
    return Object.assign(
      new RdmaError(
        'ERR_RDMA_QUEUE_FULL',
        `${what} queue full: ${index} work request(s) of the batch were posted`,
        { retryable: true },
      ),
      {
        posted: index,
      },
    );
  }
  if (code === POST_BAD_INLINE) {
    return Object.assign(
      new RdmaError(
        'ERR_RDMA_INVALID_ARG',
        `inline ${what} work request ${index} of the batch reads memory that is not registered; ${index} were posted`,
      ),
      { posted: index },
    );
  }
  return new RdmaError('ERR_RDMA_SYSTEM', `post ${what} failed (${rc})`);
}

import { EventEmitter } from 'node:events';
import type { CompletionQueue } from './CompletionQueue.js';
import type { DeviceContext } from './Device.js';
import { errnoName, RdmaError, RdmaPostError, RdmaSystemError } from './errors.js';
import { ABI } from './internal/abi.js';
import { QP_STATE_CODE, qpStateName } from './internal/codes.js';
import type { QpDriver, QpHost, QpPath } from './internal/driver.js';
import {
  asList,
  operandView,
  packRecvWr,
  packSendWr,
  recvWrWords,
  sendWrWords,
} from './internal/encode.js';
import { Resource } from './internal/lifecycle.js';
import {
  checkCreate,
  type kCreate,
  kDriver,
  kLoopFed,
  kNotify,
  kUse,
  kWords,
} from './internal/symbols.js';
import {
  describe,
  intError,
  invalid,
  isIntIn,
  optInt,
  outOfRange,
  readOptions,
} from './internal/validate.js';
import { SendWrList } from './SendWrList.js';
import type { SharedReceiveQueue } from './SharedReceiveQueue.js';
import {
  Access,
  type ConnectOptions,
  type Endpoint,
  type QpCaps,
  type QpState,
  type RecvWr,
  type RouteOptions,
  type SendWr,
} from './types.js';

/**
 * Default local ACK timeout exponent of connect()/toRts(): 4.096 µs × 2^14 ≈ 67 ms.
 * With DEFAULT_RETRY_COUNT a dead peer fails a work request with RETRY_EXC_ERR after
 * (retries + 1) timeouts ≈ 0.47 s; DEAD_PEER_BOUND_MS is the documented bound.
 */
export const DEFAULT_TIMEOUT = 14;
/** 6, not 7: rxe treats 7 as infinite (soft and real NICs do not), so 6 detects on both. */
export const DEFAULT_RETRY_COUNT = 6;
/** Documented bound on detecting a dead peer with the defaults (soft and rxe), in ms. */
export const DEAD_PEER_BOUND_MS = 2000;

/**
 * QP_FATAL: the QP was moved to error by the device (or, on soft, by its peer).
 * LAST_WQE_REACHED: a QP on a shared receive queue entered error and no receive it took
 * from the SRQ is still in use (after any QP_FATAL; once per error).
 */
export type QpAsyncEvent = { type: 'QP_FATAL'; error: RdmaError } | { type: 'LAST_WQE_REACHED' };

/** What `pd.createQp()` hands its new queue pair. */
export interface QpInit {
  handle: number;
  caps: QpCaps;
  path: QpPath;
  sendCq: CompletionQueue;
  recvCq: CompletionQueue;
  srq: SharedReceiveQueue | undefined;
}

const ALL_REMOTE = Access.RemoteWrite | Access.RemoteRead | Access.RemoteAtomic;
const CONNECT_OPTIONS = [
  'rnrRetry',
  'retryCount',
  'timeout',
  'minRnrTimer',
  'access',
  'hopLimit',
  'sl',
  'trafficClass',
] as const;

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
  readonly #emitter = new EventEmitter();
  readonly #ctx: DeviceContext;
  readonly #handle: number;
  readonly #driver: QpDriver;
  /** counted in its CQs as fed only through the event loop (kLoopFed) */
  #overLoop = false;
  /** the device's post record: how many WRs a post took */
  readonly #posted: Uint32Array;
  readonly #sendScratch: Float64Array;
  readonly #sendOperands: BigUint64Array;
  readonly #recvScratch: Float64Array;
  /** Read once here, not through caps / ctx.driver.info.limits per posted WR. */
  readonly #maxSendWr: number;
  readonly #maxSendSge: number;
  readonly #maxInline: number;
  readonly #maxMsg: number;
  readonly #maxRecvWr: number;
  readonly #maxRecvSge: number;
  readonly #one: [SendWr | RecvWr] = [undefined as unknown as SendWr];

  /** Queue pairs come from `pd.createQp()`. */
  constructor(key: typeof kCreate, parent: Resource, ctx: DeviceContext, init: QpInit) {
    checkCreate(key, 'pd.createQp()');
    super(parent);
    this.#ctx = ctx;
    this.#handle = init.handle;
    this.#posted = ctx.driver.postRecord;
    this.#driver = ctx.driver.qp(this.#host(), init.path);
    this.qpn = this.#driver.qpn;
    const g = this.#driver.granted;
    // ibverbs reports what the device granted: the real ring sizes are the capacity.
    this.caps = {
      ...init.caps,
      maxSendWr: g.maxSendWr ?? init.caps.maxSendWr,
      maxRecvWr: init.srq ? 0 : (g.maxRecvWr ?? init.caps.maxRecvWr),
      maxInlineData: g.maxInlineData ?? init.caps.maxInlineData,
    };
    this.sendCq = init.sendCq;
    this.recvCq = init.recvCq;
    this.srq = init.srq;
    this.#sendScratch = new Float64Array(this.caps.maxSendWr * sendWrWords(this.caps.maxSendSge));
    this.#sendOperands = operandView(this.#sendScratch);
    this.#maxSendWr = this.caps.maxSendWr;
    this.#maxSendSge = this.caps.maxSendSge;
    this.#maxInline = this.caps.maxInlineData;
    this.#maxMsg = ctx.driver.info.limits.maxMsgSize;
    this.#maxRecvWr = this.caps.maxRecvWr;
    this.#maxRecvSge = this.caps.maxRecvSge;
    this.#recvScratch = new Float64Array(
      Math.max(this.caps.maxRecvWr, 1) * recvWrWords(this.caps.maxRecvSge),
    );
    this.sendCq[kUse](1);
    this.recvCq[kUse](1);
    this.srq?.[kUse](1);
    ctx.qps.set(init.handle, this);
  }

  // What the provider driver may do to this QP (nothing public: no `this` leaks to it).
  #host(): QpHost {
    const qp = this;
    return {
      handle: this.#handle,
      get closed() {
        return qp.closed;
      },
      transitioned: (to, rc) => {
        if (rc !== 0) throw this.#transitionError(to, rc);
      },
      toError: () => this.toError(),
    };
  }

  get state(): QpState {
    this.assertOpen();
    return qpStateName(this.#ctx.driver.native.qpState(this.#handle));
  }

  /** What the peer needs to connect to this QP (JSON-serialisable). */
  endpoint(): Endpoint {
    this.assertOpen();
    return this.#driver.endpoint();
  }

  /** reset → init. `access`: remote access granted to the peer (default all). */
  toInit(options?: { access?: number }): void {
    this.assertOpen();
    const o = readOptions('toInit options', options, ['access']);
    this.#driver.toInit(optInt('access', o.access, 0, 15, ALL_REMOTE));
  }

  /** init → rtr, bound to the remote endpoint (validated: it is untrusted input). */
  toRtr(remote: Endpoint, options?: { minRnrTimer?: number } & RouteOptions): void {
    this.assertOpen();
    const o = readOptions('toRtr options', options, [
      'minRnrTimer',
      'hopLimit',
      'sl',
      'trafficClass',
    ]);
    const minRnr = optInt('minRnrTimer', o.minRnrTimer, 0, 31, 12);
    this.#driver.prepareRtr(remote, minRnr, routeOf(o))();
    this.#syncLoopFed();
  }

  /** Tells the CQs whether this QP's completions now come only through the event loop. */
  #syncLoopFed(): void {
    const now = this.#driver.overLoop === true;
    if (now === this.#overLoop) return;
    this.#overLoop = now;
    const d = now ? 1 : -1;
    this.sendCq[kLoopFed](d);
    this.recvCq[kLoopFed](d);
  }

  /** rtr → rts. */
  toRts(options?: { timeout?: number; retryCount?: number; rnrRetry?: number }): void {
    this.assertOpen();
    const o = readOptions('toRts options', options, ['timeout', 'retryCount', 'rnrRetry']);
    this.#driver.toRts(
      optInt('timeout', o.timeout, 0, 31, DEFAULT_TIMEOUT),
      optInt('retryCount', o.retryCount, 0, 7, DEFAULT_RETRY_COUNT),
      optInt('rnrRetry', o.rnrRetry, 0, 7, 7),
    );
  }

  /** Any state → error: outstanding work is flushed with WR_FLUSH_ERR. */
  toError(): void {
    this.#modify('error');
  }

  /** Any state → reset: queues are emptied without completions; the QP can be reused. */
  reset(): void {
    this.#modify('reset');
    this.#driver.onReset();
    this.#syncLoopFed();
  }

  /** Walks reset → init → rtr → rts in one call; options are checked before any step. */
  connect(remote: Endpoint, options?: ConnectOptions): void {
    this.assertOpen();
    const o = readOptions('connect options', options, CONNECT_OPTIONS);
    const access = optInt('access', o.access, 0, 15, ALL_REMOTE);
    const minRnr = optInt('minRnrTimer', o.minRnrTimer, 0, 31, 12);
    const timeout = optInt('timeout', o.timeout, 0, 31, DEFAULT_TIMEOUT);
    const retry = optInt('retryCount', o.retryCount, 0, 7, DEFAULT_RETRY_COUNT);
    const rnr = optInt('rnrRetry', o.rnrRetry, 0, 7, 7);
    const toRtr = this.#driver.prepareRtr(remote, minRnr, routeOf(o)); // checks the peer first
    if (this.state === 'reset') this.#driver.toInit(access);
    toRtr();
    this.#syncLoopFed();
    this.#driver.toRts(timeout, retry, rnr);
  }

  /**
   * Posts one or more send WRs. The batch is validated whole before anything is posted.
   * A full send queue throws RdmaPostError ERR_RDMA_QUEUE_FULL with `posted` = how many
   * went in.
   */
  postSend(wrs: SendWr | readonly SendWr[]): void {
    this.assertOpen();
    const list = asList(wrs, this.#one as [SendWr]);
    const n = Math.min(list.length, this.#maxSendWr);
    let p = 0;
    for (let i = 0; i < n; i++) {
      p = packSendWr(
        this.#sendScratch,
        this.#sendOperands,
        p,
        list[i] as SendWr,
        this.#maxSendSge,
        this.#maxInline,
        this.#maxMsg,
      );
    }
    const rc = this.#ctx.driver.native.postSend(this.#handle, this.#sendScratch, n, 0);
    this.#driver.afterPost();
    if (rc !== ABI.POST_OK) throw postError(rc, this.#lastPosted(), 'send', this.state);
    if (list.length > n) throw postError(ABI.POST_ENOMEM, n, 'send', 'rts');
  }

  /**
   * Posts records `[start, start + count)` of a pre-encoded list (see SendWrList) in one
   * crossing: postSend's semantics and errors, without reading or checking WR objects per
   * record (add() checked them). The list's largest SGE count, inline payload and message
   * are checked against this QP's limits first (ERR_RDMA_OUT_OF_RANGE, nothing posted).
   * More records than the send queue holds: those that fit are posted, then ENOMEM.
   */
  postSendList(list: SendWrList, start = 0, count = list.length - start): void {
    this.assertOpen();
    if (!(list instanceof SendWrList)) throw invalid('postSendList takes a SendWrList');
    const len = list.length;
    if (!isIntIn(start, 0, len)) throw intError('start', start, 0, len);
    if (!isIntIn(count, 0, len - start)) throw intError('count', count, 0, len - start);
    if (list.maxSgeUsed > this.#maxSendSge)
      throw outOfRange(
        `sgList has ${list.maxSgeUsed} entries, the queue allows ${this.#maxSendSge}`,
      );
    if (list.maxInlineBytes > this.#maxInline)
      throw outOfRange(
        `inline payload of ${list.maxInlineBytes} bytes exceeds maxInlineData ${this.#maxInline}`,
      );
    if (list.maxBytes > this.#maxMsg)
      throw outOfRange(
        `message of ${list.maxBytes} bytes exceeds the device's maximum ${this.#maxMsg}`,
      );
    const n = Math.min(count, this.#maxSendWr);
    const rc = this.#ctx.driver.native.postSend(this.#handle, list[kWords], n, list.start(start));
    this.#driver.afterPost();
    if (rc !== ABI.POST_OK) throw postError(rc, this.#lastPosted(), 'send', this.state);
    if (count > n) throw postError(ABI.POST_ENOMEM, n, 'send', 'rts');
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
    const n = Math.min(list.length, this.#maxRecvWr);
    let p = 0;
    for (let i = 0; i < n; i++)
      p = packRecvWr(this.#recvScratch, p, list[i] as RecvWr, this.#maxRecvSge);
    const rc = this.#ctx.driver.native.postRecv(this.#handle, this.#recvScratch, n);
    if (rc !== ABI.POST_OK) throw postError(rc, this.#lastPosted(), 'receive', this.state);
    if (list.length > n) throw postError(ABI.POST_ENOMEM, n, 'receive', 'rts');
  }

  /** How many WRs the last post took (the post record the native side wrote). */
  #lastPosted(): number {
    return this.#posted[ABI.POST_REC_POSTED] as number;
  }

  on(event: 'asyncEvent', listener: (e: QpAsyncEvent) => void): this {
    if (event !== 'asyncEvent') throw invalid(`unknown event ${describe(event)}: 'asyncEvent'`);
    this.#emitter.on(event, listener);
    return this;
  }

  off(event: 'asyncEvent', listener: (e: QpAsyncEvent) => void): this {
    this.#emitter.off(event, listener);
    return this;
  }

  /** @internal fault injection (`@rdmajs/verbs/testing`) */
  get [kDriver](): QpDriver {
    this.assertOpen();
    return this.#driver;
  }

  /** @internal notifications from the device */
  [kNotify](what: 'fatal' | 'lastWqe' | 'link'): void {
    if (this.closed) return;
    if (what === 'link') {
      this.#driver.onLink();
      return;
    }
    if (what === 'lastWqe') {
      this.#emitter.emit('asyncEvent', { type: 'LAST_WQE_REACHED' } satisfies QpAsyncEvent);
      return;
    }
    this.#emitter.emit('asyncEvent', {
      type: 'QP_FATAL',
      error: new RdmaError(
        'ERR_RDMA_INVALID_STATE',
        `QP ${this.qpn} was moved to error (${this.#ctx.driver.info.provider === 'soft' ? 'by its peer' : 'fatal async event from the device'})`,
      ),
    } satisfies QpAsyncEvent);
  }

  #modify(to: 'error' | 'reset'): void {
    this.assertOpen();
    const rc = this.#ctx.driver.native.modifyQp(this.#handle, QP_STATE_CODE[to]);
    if (rc !== 0) throw this.#transitionError(to, rc);
  }

  #transitionError(to: QpState, rc: number): RdmaSystemError {
    const from = this.state;
    return new RdmaSystemError(
      'ibv_modify_qp',
      rc,
      `cannot move QP ${this.qpn} from ${from} to ${to} (${errnoName(rc)})`,
      'ERR_RDMA_INVALID_STATE',
    );
  }

  protected kind(): 'queue pair' {
    return 'queue pair';
  }

  protected release(): void {
    this.#ctx.driver.native.destroyQp(this.#handle);
    this.#ctx.qps.delete(this.#handle);
    this.sendCq[kUse](-1);
    this.recvCq[kUse](-1);
    this.srq?.[kUse](-1);
    if (this.#overLoop) {
      this.sendCq[kLoopFed](-1);
      this.recvCq[kLoopFed](-1);
    }
  }
}

function routeOf(o: Partial<Record<'hopLimit' | 'sl' | 'trafficClass', unknown>>): RouteOptions {
  const r: RouteOptions = {};
  // Range-checked by the provider's driver (soft refuses them).
  if (o.hopLimit !== undefined) r.hopLimit = o.hopLimit as number;
  if (o.sl !== undefined) r.sl = o.sl as number;
  if (o.trafficClass !== undefined) r.trafficClass = o.trafficClass as number;
  return r;
}

// A post that stopped short: `code` (POST_*) says why, `index` WRs of the batch went in.
function postError(code: number, index: number, what: string, state: QpState): RdmaError {
  if (code === ABI.POST_EINVAL)
    return new RdmaPostError(
      'ERR_RDMA_INVALID_STATE',
      `cannot post a ${what} in state ${state}`,
      index,
      false,
    );
  if (code === ABI.POST_ENOMEM)
    return new RdmaPostError(
      'ERR_RDMA_QUEUE_FULL',
      `${what} queue full: ${index} work request(s) of the batch were posted`,
      index,
      true,
    );
  if (code === ABI.POST_BAD_INLINE)
    return new RdmaPostError(
      'ERR_RDMA_INVALID_ARG',
      `inline ${what} work request ${index} of the batch reads memory that is not registered; ${index} were posted`,
      index,
      false,
    );
  if (code === ABI.POST_BUSY)
    return new RdmaPostError(
      'ERR_RDMA_BUSY',
      `the ${what} queue is locked by a peer process that did not let go within the budget (stopped, traced or descheduled); nothing was posted, try again`,
      index,
      true,
    );
  return new RdmaPostError('ERR_RDMA_SYSTEM', `post ${what} failed (${code})`, index, false);
}

import { EventEmitter } from 'node:events';
import { RdmaError, RdmaPostError } from './errors.js';
import { ABI } from './internal/abi.js';
import type { DeviceDriver } from './internal/driver.js';
import { asList, packRecvWr, recvWrWords } from './internal/encode.js';
import { Resource } from './internal/lifecycle.js';
import type { NativeDevice } from './internal/native.js';
import { checkCreate, type kCreate, kHandle, kNotify, kUse } from './internal/symbols.js';
import { checkInt, describe, invalid } from './internal/validate.js';
import type { RecvWr } from './types.js';

export type SrqAsyncEvent = { type: 'SRQ_LIMIT_REACHED' };

/** A receive queue shared by many QPs of one protection domain. */
export class SharedReceiveQueue extends Resource {
  readonly maxWr: number;
  readonly maxSge: number;
  /** The protection domain this queue belongs to (QPs of that PD only may use it). */
  readonly pd: Resource;
  readonly #emitter = new EventEmitter();
  readonly #native: NativeDevice;
  readonly #handle: number;
  /** the device's post record: how many WRs a post took */
  readonly #posted: Uint32Array;
  readonly #scratch: Float64Array;
  readonly #one: [RecvWr] = [undefined as unknown as RecvWr];
  #users = 0;
  readonly #registry: Map<number, SharedReceiveQueue>;

  /** Shared receive queues come from `pd.createSrq()`. */
  constructor(
    key: typeof kCreate,
    parent: Resource,
    driver: DeviceDriver,
    handle: number,
    maxWr: number,
    maxSge: number,
    registry: Map<number, SharedReceiveQueue>,
  ) {
    checkCreate(key, 'pd.createSrq()');
    super(parent);
    this.pd = parent;
    this.#registry = registry;
    registry.set(handle, this);
    this.#native = driver.native;
    this.#posted = driver.postRecord;
    this.#handle = handle;
    this.maxWr = maxWr;
    this.maxSge = maxSge;
    this.#scratch = new Float64Array(maxWr * recvWrWords(maxSge));
  }

  /** @internal */
  get [kHandle](): number {
    return this.#handle;
  }

  /**
   * Posts one or more receive WRs. The batch is validated whole before anything is
   * posted; a full queue throws RdmaPostError ERR_RDMA_QUEUE_FULL with `posted`.
   */
  postRecv(wrs: RecvWr | readonly RecvWr[]): void {
    this.assertOpen();
    const list = asList(wrs, this.#one);
    const n = Math.min(list.length, this.maxWr);
    let p = 0;
    for (let i = 0; i < n; i++) p = packRecvWr(this.#scratch, p, list[i] as RecvWr, this.maxSge);
    const rc = this.#native.postSrqRecv(this.#handle, this.#scratch, n);
    if (rc === ABI.POST_OK && list.length === n) return;
    const posted = rc === ABI.POST_OK ? n : (this.#posted[ABI.POST_REC_POSTED] as number);
    if (rc === ABI.POST_BUSY)
      throw new RdmaPostError(
        'ERR_RDMA_BUSY',
        'the shared receive queue is locked by a peer process that did not let go within the budget (stopped, traced or descheduled); nothing was posted, try again',
        posted,
        true,
      );
    throw new RdmaPostError(
      'ERR_RDMA_QUEUE_FULL',
      `shared receive queue full: ${posted} work request(s) of the batch were posted`,
      posted,
      true,
    );
  }

  /** Emits `'asyncEvent'` `{ type: 'SRQ_LIMIT_REACHED' }` once fewer than `limit` receives remain. */
  armLimit(limit: number): void {
    this.assertOpen();
    this.#native.armSrqLimit(this.#handle, checkInt('limit', limit, 1, this.maxWr));
  }

  on(event: 'asyncEvent', listener: (e: SrqAsyncEvent) => void): this {
    if (event !== 'asyncEvent') throw invalid(`unknown event ${describe(event)}: 'asyncEvent'`);
    this.#emitter.on(event, listener);
    return this;
  }

  off(event: 'asyncEvent', listener: (e: SrqAsyncEvent) => void): this {
    this.#emitter.off(event, listener);
    return this;
  }

  /** @internal */
  [kNotify](what: 'limit'): void {
    if (what === 'limit' && !this.closed)
      this.#emitter.emit('asyncEvent', { type: 'SRQ_LIMIT_REACHED' } satisfies SrqAsyncEvent);
  }

  /** @internal */
  [kUse](delta: number): void {
    this.#users += delta;
  }

  override close(): void {
    if (this.closed) return;
    if (this.#users > 0)
      throw new RdmaError(
        'ERR_RDMA_BUSY',
        `shared receive queue is used by ${this.#users} queue pair(s)`,
      );
    super.close();
  }

  protected kind(): 'shared receive queue' {
    return 'shared receive queue';
  }

  protected release(): void {
    this.#native.destroySrq(this.#handle);
    this.#registry.delete(this.#handle);
  }
}

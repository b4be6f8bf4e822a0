import { EventEmitter } from 'node:events';
import { RdmaError } from './errors.js';
import { asList, packRecvWr, recvWrWords } from './internal/encode.js';
import { Resource } from './internal/lifecycle.js';
import type { NativeDevice } from './internal/native.js';
import { checkInt } from './internal/validate.js';
import type { RecvWr } from './types.js';

/** A receive queue shared by many QPs of one protection domain. */
export class SharedReceiveQueue extends Resource {
  readonly maxWr: number;
  readonly maxSge: number;
  readonly events = new EventEmitter();
  readonly #native: NativeDevice;
  /** @internal */
  readonly handle: number;
  readonly #scratch: Float64Array;
  readonly #one: [RecvWr] = [undefined as unknown as RecvWr];
  #users = 0;
  readonly #registry: Map<number, SharedReceiveQueue>;

  /** @internal */
  constructor(
    parent: Resource,
    native: NativeDevice,
    handle: number,
    maxWr: number,
    maxSge: number,
    registry: Map<number, SharedReceiveQueue>,
  ) {
    super(parent);
    this.#registry = registry;
    registry.set(handle, this);
    this.#native = native;
    this.handle = handle;
    this.maxWr = maxWr;
    this.maxSge = maxSge;
    this.#scratch = new Float64Array(maxWr * recvWrWords(maxSge));
  }

  postRecv(wrs: RecvWr | readonly RecvWr[]): void {
    this.assertOpen();
    const list = asList(wrs, this.#one as [RecvWr]);
    const n = Math.min(list.length, this.maxWr);
    let p = 0;
    for (let i = 0; i < n; i++) p = packRecvWr(this.#scratch, p, list[i] as RecvWr, this.maxSge);
    const rc = this.#native.postSrqRecv(this.handle, this.#scratch, n);
    const posted = rc === 0 ? n : rc >> 8;
    if (rc !== 0 || list.length > n) {
      throw Object.assign(
        new RdmaError('ERR_RDMA_QUEUE_FULL', `shared receive queue full: ${posted} posted`, {
          retryable: true,
        }),
        {
          posted,
        },
      );
    }
  }

  /** Emits `'asyncEvent'` `{ type: 'SRQ_LIMIT_REACHED' }` once fewer than `limit` receives remain. */
  armLimit(limit: number): void {
    this.assertOpen();
    this.#native.armSrqLimit(this.handle, checkInt('limit', limit, 1, this.maxWr));
  }

  /** @internal */
  onLimit(): void {
    this.events.emit('asyncEvent', { type: 'SRQ_LIMIT_REACHED' });
  }

  /** @internal */
  use(delta: number): void {
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

  protected kind(): string {
    return 'shared receive queue';
  }

  protected release(): void {
    this.#native.destroySrq(this.handle);
    this.#registry.delete(this.handle);
  }
}

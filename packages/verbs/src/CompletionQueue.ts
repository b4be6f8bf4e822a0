import { EventEmitter } from 'node:events';
import { RdmaError } from './errors.js';
import { ABI } from './internal/abi.js';
import { Resource } from './internal/lifecycle.js';
import type { NativeDevice } from './internal/native.js';
import { checkCreate, type kCreate, kHandle, kNotify, kUse } from './internal/symbols.js';
import {
  checkInt,
  checkNumber,
  describe,
  invalid,
  MAX_TIMEOUT_MS,
  readOptions,
} from './internal/validate.js';
import type { WorkCompletion } from './types.js';
import { fillCompletion } from './WorkCompletions.js';

export interface WaitOptions {
  /**
   * Give up after this long with ERR_RDMA_TIMEOUT, 0..2^31−1 ms. Every wait has a
   * deadline: default 30 000.
   */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Busy-poll this long before sleeping on the event (adaptive polling), 0..10^6. Default 50. */
  spinUs?: number;
}

export const DEFAULT_WAIT_MS = 30_000;

export type CqAsyncEvent = { type: 'CQ_ERR'; error: RdmaError };

const RECORD_WORDS = ABI.WC_WORDS;

/**
 * A completion queue. `poll()` fills caller-preallocated records and allocates nothing;
 * `waitForCompletion()` and the `'completion'` event integrate with the event loop:
 * spin briefly after activity, then sleep on the device's doorbell (≈0 % CPU idle).
 */
export class CompletionQueue extends Resource {
  readonly capacity: number;
  readonly #emitter = new EventEmitter();
  readonly #native: NativeDevice;
  readonly #handle: number;
  readonly #registry: Map<number, CompletionQueue>;
  #raw = new Float64Array(RECORD_WORDS * 16);
  #notifyRequested = false;
  #users = 0;
  #overrun = false;

  /** Completion queues come from `device.createCq()`. */
  constructor(
    key: typeof kCreate,
    parent: Resource,
    native: NativeDevice,
    handle: number,
    registry: Map<number, CompletionQueue>,
  ) {
    checkCreate(key, 'device.createCq()');
    super(parent);
    this.#native = native;
    this.#handle = handle;
    this.#registry = registry;
    this.capacity = native.cqCapacity(handle);
    registry.set(handle, this);
  }

  /** @internal */
  get [kHandle](): number {
    return this.#handle;
  }

  /** True once the queue overflowed (an async CQ_ERR was raised). */
  get overrun(): boolean {
    return this.#overrun;
  }

  /**
   * Polls up to `max` (default out.length) completions into `out` (records from
   * `allocCompletions()`); returns how many. Arguments are checked before any
   * completion is taken, so none is lost to a bad argument.
   */
  poll(out: WorkCompletion[], max?: number): number {
    this.assertOpen();
    if (!Array.isArray(out))
      throw invalid(`poll takes an array of completion records, got ${describe(out)}`);
    // A max above out.length polls out.length: "up to max".
    const n =
      max === undefined
        ? out.length
        : Math.min(checkInt('max', max, 0, Number.MAX_SAFE_INTEGER), out.length);
    for (let i = 0; i < n; i++) {
      const wc = out[i];
      if (wc === null || typeof wc !== 'object' || Object.isFrozen(wc))
        throw invalid(`out[${i}] must be a writable completion record (allocCompletions())`);
    }
    if (this.#raw.length < n * RECORD_WORDS) this.#raw = new Float64Array(n * RECORD_WORDS);
    const got = this.#native.pollCq(this.#handle, this.#raw, n);
    for (let i = 0; i < got; i++)
      fillCompletion(out[i] as WorkCompletion, this.#raw, i * RECORD_WORDS);
    return got;
  }

  /** Completions waiting to be polled. */
  pending(): number {
    this.assertOpen();
    return this.#native.cqCount(this.#handle);
  }

  /** Arms a one-shot `'completion'` event for the next completion (ibv_req_notify_cq). */
  requestNotify(): void {
    this.assertOpen();
    this.#notifyRequested = true;
    if (this.#native.armCq(this.#handle) > 0) {
      // Already there: ibverbs would not notify, which loses the wake-up; we do.
      queueMicrotask(() => this.#deliver());
    }
  }

  on(event: 'completion', listener: () => void): this;
  on(event: 'asyncEvent', listener: (e: CqAsyncEvent) => void): this;
  on(event: 'completion' | 'asyncEvent', listener: (...args: never[]) => void): this {
    this.#emitter.on(checkEvent(event), listener as (...args: unknown[]) => void);
    return this;
  }

  off(event: 'completion', listener: () => void): this;
  off(event: 'asyncEvent', listener: (e: CqAsyncEvent) => void): this;
  off(event: 'completion' | 'asyncEvent', listener: (...args: never[]) => void): this {
    this.#emitter.off(checkEvent(event), listener as (...args: unknown[]) => void);
    return this;
  }

  /** Resolves when poll() would return at least one completion. */
  waitForCompletion(options?: WaitOptions): Promise<void> {
    this.assertOpen();
    const o = readOptions('waitForCompletion options', options, ['timeoutMs', 'signal', 'spinUs']);
    const timeoutMs = checkNumber(
      'timeoutMs',
      o.timeoutMs === undefined ? DEFAULT_WAIT_MS : o.timeoutMs,
      0,
      MAX_TIMEOUT_MS,
    );
    const spinUs = checkNumber('spinUs', o.spinUs === undefined ? 50 : o.spinUs, 0, 1e6);
    const signal = o.signal;
    if (signal !== undefined && !(signal instanceof AbortSignal))
      throw invalid(`signal must be an AbortSignal, got ${describe(signal)}`);
    if (this.#native.cqCount(this.#handle) > 0) return Promise.resolve();
    const spinUntil = performance.now() + spinUs / 1000;
    while (performance.now() < spinUntil) {
      if (this.#native.cqCount(this.#handle) > 0) return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        this.#emitter.off('completion', onCompletion);
        this.#emitter.off('closed', onClosed);
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const onCompletion = () => done();
      const onClosed = () =>
        done(new RdmaError('ERR_RDMA_CLOSED', 'completion queue closed while waiting'));
      const onAbort = () =>
        done(new RdmaError('ERR_RDMA_TIMEOUT', 'wait aborted', { cause: signal?.reason }));
      const timer = setTimeout(
        () =>
          done(
            new RdmaError('ERR_RDMA_TIMEOUT', `no completion within ${timeoutMs} ms`, {
              retryable: true,
            }),
          ),
        timeoutMs,
      );
      this.#emitter.on('completion', onCompletion);
      this.#emitter.once('closed', onClosed);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.requestNotify();
    });
  }

  /** @internal notifications from the device */
  [kNotify](what: 'doorbell' | 'overrun'): void {
    if (this.closed) return;
    if (what === 'overrun') {
      this.#overrun = true;
      this.#emitter.emit('asyncEvent', {
        type: 'CQ_ERR',
        error: new RdmaError(
          'ERR_RDMA_CQ_OVERRUN',
          `completion queue of ${this.capacity} entries overran`,
        ),
      } satisfies CqAsyncEvent);
      return;
    }
    // Re-arm and count: the event used up the arm (ibverbs), and a poll that ran first may
    // have taken the completion; then the next one must still wake us.
    if (this.#notifyRequested && this.#native.armCq(this.#handle) > 0) this.#deliver();
  }

  /** @internal a QP or SRQ starts or stops using this CQ */
  [kUse](delta: number): void {
    this.#users += delta;
  }

  #deliver(): void {
    if (!this.#notifyRequested || this.closed) return;
    this.#notifyRequested = false;
    this.#emitter.emit('completion');
  }

  override close(): void {
    if (this.closed) return;
    if (this.#users > 0) {
      throw new RdmaError(
        'ERR_RDMA_BUSY',
        `completion queue is used by ${this.#users} queue pair(s); close them first`,
      );
    }
    super.close();
  }

  protected kind(): 'completion queue' {
    return 'completion queue';
  }

  protected release(): void {
    this.#native.destroyCq(this.#handle);
    this.#registry.delete(this.#handle);
    this.#emitter.emit('closed');
  }
}

function checkEvent(event: unknown): 'completion' | 'asyncEvent' {
  if (event !== 'completion' && event !== 'asyncEvent')
    throw invalid(`unknown event ${describe(event)}: 'completion' or 'asyncEvent'`);
  return event;
}

import { EventEmitter } from 'node:events';
import { RdmaError } from './errors.js';
import { Resource } from './internal/lifecycle.js';
import type { NativeDevice } from './internal/native.js';
import type { WorkCompletion } from './types.js';
import { allocCompletions, fillCompletion } from './WorkCompletions.js';

export interface WaitOptions {
  /** Give up after this long with ERR_RDMA_TIMEOUT. Required: every wait has a deadline. */
  timeoutMs: number;
  signal?: AbortSignal;
  /** Busy-poll this long before sleeping on the event (adaptive polling). Default 50. */
  spinUs?: number;
}

export type CqAsyncEvent = { type: 'CQ_ERR'; error: RdmaError };

/**
 * A completion queue. `poll()` fills caller-preallocated records and allocates nothing;
 * `waitForCompletion()` and the `'completion'` event integrate with the event loop:
 * spin briefly after activity, then sleep on the device's doorbell (≈0 % CPU idle).
 */
export class CompletionQueue extends Resource {
  /** Preallocated records for poll(). */
  static allocCompletions = allocCompletions;
  readonly capacity: number;
  readonly events = new EventEmitter();
  readonly #native: NativeDevice;
  /** @internal */
  readonly handle: number;
  #raw = new Float64Array(8 * 16);
  #notifyRequested = false;
  #users = 0;
  #overrun = false;
  readonly #onRelease: () => void;

  /** @internal */
  constructor(parent: Resource, native: NativeDevice, handle: number, onRelease: () => void) {
    super(parent);
    this.#onRelease = onRelease;
    this.#native = native;
    this.handle = handle;
    this.capacity = native.cqCapacity(handle);
  }

  /** True once the queue overflowed (an async CQ_ERR was raised). */
  get overrun(): boolean {
    return this.#overrun;
  }

  /** Polls up to `max` (default out.length) completions into `out`; returns how many. */
  poll(out: WorkCompletion[], max = out.length): number {
    this.assertOpen();
    const n = Math.max(0, Math.min(Math.trunc(max) || 0, out.length));
    if (this.#raw.length < n * 8) this.#raw = new Float64Array(n * 8);
    const got = this.#native.pollCq(this.handle, this.#raw, n);
    for (let i = 0; i < got; i++) fillCompletion(out[i] as WorkCompletion, this.#raw, i * 8);
    return got;
  }

  /** Completions waiting to be polled. */
  pending(): number {
    this.assertOpen();
    return this.#native.cqCount(this.handle);
  }

  /** Arms a one-shot `'completion'` event for the next completion (ibv_req_notify_cq). */
  requestNotify(): void {
    this.assertOpen();
    this.#notifyRequested = true;
    if (this.#native.armCq(this.handle) > 0) {
      // Already there: ibverbs would not notify, which loses the wake-up; we do.
      queueMicrotask(() => this.#deliver());
    }
  }

  on(event: 'completion', listener: () => void): this;
  on(event: 'asyncEvent', listener: (e: CqAsyncEvent) => void): this;
  on(event: string, listener: (...args: never[]) => void): this {
    this.events.on(event, listener as (...args: unknown[]) => void);
    return this;
  }

  off(event: string, listener: (...args: never[]) => void): this {
    this.events.off(event, listener as (...args: unknown[]) => void);
    return this;
  }

  /** Resolves when poll() would return at least one completion. */
  waitForCompletion(options: WaitOptions): Promise<void> {
    this.assertOpen();
    const { timeoutMs, signal } = options;
    if (!(timeoutMs >= 0)) throw new RdmaError('ERR_RDMA_INVALID_ARG', 'timeoutMs must be >= 0');
    if (this.#native.cqCount(this.handle) > 0) return Promise.resolve();
    const spinUntil = performance.now() + (options.spinUs ?? 50) / 1000;
    while (performance.now() < spinUntil) {
      if (this.#native.cqCount(this.handle) > 0) return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        this.events.off('completion', onCompletion);
        this.events.off('closed', onClosed);
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
      this.events.on('completion', onCompletion);
      this.events.once('closed', onClosed);
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.requestNotify();
    });
  }

  /** @internal doorbell from the device */
  onDoorbell(): void {
    // Re-arm and count: the event used up the arm (ibverbs), and a poll that ran first may
    // have taken the completion; then the next one must still wake us.
    if (this.#notifyRequested && !this.closed && this.#native.armCq(this.handle) > 0)
      this.#deliver();
  }

  /** @internal */
  onOverrun(): void {
    this.#overrun = true;
    this.events.emit('asyncEvent', {
      type: 'CQ_ERR',
      error: new RdmaError(
        'ERR_RDMA_CQ_OVERRUN',
        `completion queue of ${this.capacity} entries overran`,
      ),
    } satisfies CqAsyncEvent);
  }

  /** @internal a QP or SRQ starts or stops using this CQ */
  use(delta: number): void {
    this.#users += delta;
  }

  #deliver(): void {
    if (!this.#notifyRequested || this.closed) return;
    this.#notifyRequested = false;
    this.events.emit('completion');
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
    this.events.emit('closed');
  }

  protected kind(): string {
    return 'completion queue';
  }

  protected release(): void {
    this.#native.destroyCq(this.handle);
    this.#onRelease();
  }
}

import type { AcquireOptions } from '../AcquireOptions.js';
import type { Clock } from '../Clock.js';
import { FlowctlError } from '../errors.js';
import { checkNumber, ownOptions } from './validate.js';

/** Who is told when a waiter's deadline passes or its signal aborts. */
export interface WaiterOwner {
  waiterExpired(w: Waiter): void;
  waiterAborted(w: Waiter): void;
}

/**
 * One pending acquire. Allocated only on the slow path (when the caller must wait); the
 * fast path (`tryConsume`/`tryAcquire`) allocates nothing.
 */
export class Waiter {
  prev: Waiter | null = null;
  next: Waiter | null = null;
  list: WaiterList | null = null;
  /** Free slot for the owner (e.g. the channel queue a window waiter belongs to). */
  tag: unknown = undefined;
  readonly promise: Promise<void>;
  private resolveFn!: () => void;
  private rejectFn!: (err: Error) => void;
  private timer: unknown = undefined;
  private clock: Clock | null = null;
  private signal: AbortSignal | null = null;
  private abortListener: (() => void) | null = null;
  settled = false;

  constructor(
    readonly bytes: number,
    readonly enqueuedAt: number,
    readonly deadline: number,
  ) {
    this.promise = new Promise<void>((resolve, reject) => {
      this.resolveFn = resolve;
      this.rejectFn = reject;
    });
  }

  /** Starts the deadline timer and listens to the signal. */
  arm(clock: Clock, owner: WaiterOwner, signal: AbortSignal | undefined): void {
    this.clock = clock;
    this.startTimer(clock, owner);
    if (signal !== undefined) {
      this.signal = signal;
      this.abortListener = () => {
        if (!this.settled) owner.waiterAborted(this);
      };
      signal.addEventListener('abort', this.abortListener, { once: true });
    }
  }

  /**
   * The deadline timer. A clock may fire early (a host timer caps its delay, as setTimeout
   * does at 2^31 - 1 ms): then it is set again for the rest, so a wait never ends before
   * its deadline.
   */
  private startTimer(clock: Clock, owner: WaiterOwner): void {
    this.timer = clock.setTimer(() => {
      this.timer = undefined;
      if (this.settled) return;
      if (clock.now() < this.deadline) this.startTimer(clock, owner);
      else owner.waiterExpired(this);
    }, this.deadline - clock.now());
  }

  /** The abort reason of this waiter's signal. */
  abortReason(): unknown {
    return this.signal?.reason;
  }

  resolve(): void {
    if (this.settled) return;
    this.disarm();
    this.resolveFn();
  }

  reject(err: Error): void {
    if (this.settled) return;
    this.disarm();
    this.rejectFn(err);
  }

  private disarm(): void {
    this.settled = true;
    if (this.timer !== undefined && this.clock !== null) this.clock.clearTimer(this.timer);
    this.timer = undefined;
    if (this.signal !== null && this.abortListener !== null) {
      this.signal.removeEventListener('abort', this.abortListener);
    }
    this.signal = null;
    this.abortListener = null;
  }
}

/** An intrusive FIFO of waiters with O(1) removal from the middle. */
export class WaiterList {
  head: Waiter | null = null;
  tail: Waiter | null = null;
  size = 0;
  bytes = 0;

  push(w: Waiter): void {
    w.list = this;
    w.prev = this.tail;
    w.next = null;
    if (this.tail === null) this.head = w;
    else this.tail.next = w;
    this.tail = w;
    this.size++;
    this.bytes += w.bytes;
  }

  remove(w: Waiter): void {
    if (w.list !== this) return;
    if (w.prev === null) this.head = w.next;
    else w.prev.next = w.next;
    if (w.next === null) this.tail = w.prev;
    else w.next.prev = w.prev;
    w.prev = null;
    w.next = null;
    w.list = null;
    this.size--;
    this.bytes -= w.bytes;
  }

  shift(): Waiter | null {
    const w = this.head;
    if (w !== null) this.remove(w);
    return w;
  }
}

/**
 * Resolves the absolute deadline of a wait from its options. Throws ERR_FLOWCTL_INVALID_ARG
 * for a negative or non-finite timeout/deadline.
 */
export function resolveDeadline(
  clock: Clock,
  options: AcquireOptions | Record<string, unknown> | undefined,
  defaultTimeoutMs: number,
): number {
  const now = clock.now();
  if (options === undefined) return now + defaultTimeoutMs;
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new FlowctlError('ERR_FLOWCTL_INVALID_ARG', 'signal must be an AbortSignal');
  }
  let deadline = Number.POSITIVE_INFINITY;
  if (options.timeoutMs !== undefined) {
    deadline = now + checkNumber('timeoutMs', options.timeoutMs, 0);
  }
  if (options.deadline !== undefined) {
    const d = checkNumber('deadline', options.deadline, Number.NEGATIVE_INFINITY);
    if (d < deadline) deadline = d;
  }
  return deadline === Number.POSITIVE_INFINITY ? now + defaultTimeoutMs : deadline;
}

/** The own properties of acquire options (undefined stays undefined: the defaults apply). */
export function acquireOptions(value: unknown): Record<string, unknown> | undefined {
  return value === undefined ? undefined : ownOptions('acquire options', value);
}

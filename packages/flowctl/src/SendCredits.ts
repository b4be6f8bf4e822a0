import { EventEmitter } from 'node:events';
import type { AcquireOptions } from './AcquireOptions.js';
import { type Clock, systemClock } from './Clock.js';
import {
  FlowctlAbortError,
  FlowctlClosedError,
  FlowctlDeadlineError,
  FlowctlError,
} from './errors.js';
import {
  checkClock,
  checkDestroyError,
  checkInt,
  checkNumber,
  ownOptions,
} from './internal/validate.js';
import {
  acquireOptions,
  resolveDeadline,
  Waiter,
  WaiterList,
  type WaiterOwner,
} from './internal/Waiter.js';

export interface SendCreditsOptions {
  /** Credits the peer granted in the handshake: receive buffers it posted for us. */
  initialCredits: number;
  /**
   * Credits data may never use, kept so an explicit credit update can always be sent
   * (`tryConsumeReserved`). Default 1, at least 1. Must be below `initialCredits`.
   */
  reservedCredits?: number;
  /**
   * Most credits the peer may lease us (its receive buffers for us at most): a grant beyond
   * what is outstanding grows the lease up to this; beyond it is a protocol error. Default
   * `initialCredits` (a fixed lease, every grant a return).
   */
  maxCredits?: number;
  clock?: Clock;
  /** Deadline of an `acquire` that names none. Default 30 000 ms. */
  defaultTimeoutMs?: number;
  /** Waiters beyond this are rejected with ERR_FLOWCTL_QUEUE_FULL. Default 4096. */
  maxWaiters?: number;
}

export interface SendCreditsStats {
  readonly state: SendCreditsState;
  /** Credits in hand (including the reserved ones). */
  readonly available: number;
  /** Credits spent whose buffers the peer has not returned yet. */
  readonly outstanding: number;
  readonly reserved: number;
  /** Data messages that took a credit. */
  readonly consumed: number;
  /** Credit updates that took a reserved credit. */
  readonly consumedReserved: number;
  /** Credits returned by the peer. */
  readonly granted: number;
  /** The lease: credits this side holds or has spent and not had returned (grows and shrinks). */
  readonly lease: number;
  /** Credits given back to the peer (`giveBack`): the lease shrank by these. */
  readonly givenBack: number;
  /** Times a send could not take a credit at once (tryConsume false or acquire waited). */
  readonly creditStalls: number;
  readonly waiting: number;
  readonly maxQueueDepth: number;
  /** Total time senders spent blocked on credits (ms on the injected clock). */
  readonly timeBlockedMs: number;
  readonly deadlineRejections: number;
  readonly abortRejections: number;
}

export type SendCreditsState = 'open' | 'closed' | 'destroyed';

interface SendCreditsEvents {
  drain: [];
  /** A credit is in hand again after `tryConsumeReserved` found none: send the pending update. */
  reserveAvailable: [];
}

/**
 * Sender-side credit accounting: one credit per message, because every message lands in a
 * receive buffer the peer posted. A message never goes without a credit. `reservedCredits`
 * (default 1) are kept back from data so a credit update can always be sent; without that
 * reserve two peers that both spent their last credit on data deadlock.
 *
 * Backpressure two ways: `tryConsume()` returns false and `'drain'` follows once a data
 * credit is free; or `await acquire({ timeoutMs, signal })`. A credit update that found no
 * credit (`tryConsumeReserved()` false) is told by `'reserveAvailable'` when one returns.
 */
export class SendCredits extends EventEmitter<SendCreditsEvents> {
  private total: number;
  private readonly initial: number;
  private readonly maxTotal: number;
  private readonly reserved: number;
  private readonly clock: Clock;
  private readonly defaultTimeoutMs: number;
  private readonly maxWaiters: number;
  private readonly waiters = new WaiterList();
  private readonly owner: WaiterOwner;
  private avail: number;
  private currentState: SendCreditsState = 'open';
  private needDrain = false;
  private needReserve = false;
  private blockedSince = 0;
  private consumed = 0;
  private consumedReserved = 0;
  private granted = 0;
  private givenBack = 0;
  private stalls = 0;
  private maxDepth = 0;
  private blockedMs = 0;
  private deadlines = 0;
  private aborts = 0;

  constructor(opts: SendCreditsOptions) {
    super();
    const options = ownOptions('SendCredits options', opts) as Partial<SendCreditsOptions>;
    this.reserved = checkInt('reservedCredits', options.reservedCredits ?? 1, 1);
    this.total = checkInt('initialCredits', options.initialCredits, this.reserved + 1);
    this.initial = this.total;
    this.maxTotal = checkInt('maxCredits', options.maxCredits ?? this.total, this.total);
    this.avail = this.total;
    this.clock = checkClock(options.clock) ?? systemClock;
    this.defaultTimeoutMs = checkNumber('defaultTimeoutMs', options.defaultTimeoutMs ?? 30_000, 0);
    this.maxWaiters = checkInt('maxWaiters', options.maxWaiters ?? 4096, 0);
    this.owner = {
      waiterExpired: (w) => this.fail(w, new FlowctlDeadlineError('SendCredits', w.deadline)),
      waiterAborted: (w) => this.fail(w, new FlowctlAbortError('SendCredits', w.abortReason())),
    };
  }

  get state(): SendCreditsState {
    return this.currentState;
  }

  /** Credits in hand, the reserved ones included. */
  get available(): number {
    return this.avail;
  }

  /** Credits a data message may take now. */
  get usable(): number {
    return this.avail > this.reserved ? this.avail - this.reserved : 0;
  }

  /** Credits spent and not yet returned by the peer. */
  get outstanding(): number {
    return this.total - this.avail;
  }

  /** The lease: credits held plus outstanding (`initialCredits` until the peer grows it). */
  get lease(): number {
    return this.total;
  }

  /** Credits of the lease above `initialCredits` (what `giveBack` may return). */
  get extra(): number {
    return this.total - this.initial;
  }

  /**
   * Data credits taken over the object's life (`stats().consumed`, read without building the
   * stats: a sender checks it on every timer tick to see whether it went idle).
   */
  get dataConsumed(): number {
    return this.consumed;
  }

  /**
   * Takes one credit for a data message. False when only reserved credits are left or when
   * acquires are queued (no queue jumping); `'drain'` follows when a credit is free.
   */
  tryConsume(): boolean {
    this.checkOpen('tryConsume');
    if (this.waiters.size === 0 && this.avail > this.reserved) {
      this.avail--;
      this.consumed++;
      return true;
    }
    this.stalls++;
    if (!this.needDrain) {
      this.needDrain = true;
      this.blockedSince = this.clock.now();
    }
    return false;
  }

  /**
   * Takes one credit, the reserved ones included, for a message that returns credits to
   * the peer (an explicit credit update). Never use it for data: that spends the reserve
   * and brings back the deadlock it exists to prevent.
   */
  tryConsumeReserved(): boolean {
    this.checkOpen('tryConsumeReserved');
    if (this.avail > 0) {
      this.avail--;
      this.consumedReserved++;
      return true;
    }
    this.needReserve = true;
    return false;
  }

  /**
   * Waits for one data credit. Resolves once it is taken; rejects with ERR_FLOWCTL_DEADLINE,
   * ERR_FLOWCTL_ABORTED, ERR_FLOWCTL_QUEUE_FULL or ERR_FLOWCTL_CLOSED. Throws synchronously
   * on bad options or after close.
   */
  acquire(opts?: AcquireOptions): Promise<void> {
    this.checkOpen('acquire');
    const options = acquireOptions(opts);
    const deadline = resolveDeadline(this.clock, options, this.defaultTimeoutMs);
    if (this.waiters.size === 0 && this.avail > this.reserved) {
      this.avail--;
      this.consumed++;
      return RESOLVED;
    }
    this.stalls++;
    const signal = options?.signal as AbortSignal | undefined;
    if (signal?.aborted === true) {
      this.aborts++;
      return Promise.reject(new FlowctlAbortError('SendCredits', signal.reason));
    }
    if (this.waiters.size >= this.maxWaiters) {
      return Promise.reject(
        new FlowctlError('ERR_FLOWCTL_QUEUE_FULL', 'SendCredits: too many waiting acquires', {
          retryable: true,
        }),
      );
    }
    const now = this.clock.now();
    if (deadline <= now) {
      this.deadlines++;
      return Promise.reject(new FlowctlDeadlineError('SendCredits', deadline));
    }
    const w = new Waiter(1, now, deadline);
    this.waiters.push(w);
    if (this.waiters.size > this.maxDepth) this.maxDepth = this.waiters.size;
    w.arm(this.clock, this.owner, signal);
    return w.promise;
  }

  /**
   * Credits returned by the peer (piggybacked or in an explicit update). What exceeds the
   * outstanding credits grows the lease, up to `maxCredits`. Throws ERR_FLOWCTL_PROTOCOL when
   * the peer returns more than was spent plus what the lease may still grow.
   */
  grant(credits: number): void {
    this.checkOpen('grant');
    checkInt('credits', credits, 0);
    const grow = this.avail + credits - this.total;
    if (grow > 0) {
      if (this.total + grow > this.maxTotal) {
        throw new FlowctlError(
          'ERR_FLOWCTL_PROTOCOL',
          `SendCredits: peer returned ${credits} credits but only ${this.total - this.avail} are outstanding` +
            ` and the lease may grow by ${this.maxTotal - this.total}`,
        );
      }
      this.total += grow;
    }
    this.avail += credits;
    this.granted += credits;
    // The update goes before queued data takes the credits back.
    if (this.needReserve && this.avail > 0) {
      this.needReserve = false;
      this.emit('reserveAvailable');
    }
    this.serve();
  }

  /**
   * Gives back up to `max` credits of the lease above `initialCredits` that are in hand and
   * not needed by a waiting send (the reserve stays): the lease shrinks by the returned count,
   * which the transport tells the peer. Never below `initialCredits`, never the reserve.
   */
  giveBack(max = Number.MAX_SAFE_INTEGER): number {
    this.checkOpen('giveBack');
    checkInt('max', max, 0);
    if (this.waiters.size > 0) return 0;
    const n = Math.min(max, this.total - this.initial, this.avail - this.reserved);
    if (n <= 0) return 0;
    this.total -= n;
    this.avail -= n;
    this.givenBack += n;
    return n;
  }

  /** Idempotent: rejects pending acquires with ERR_FLOWCTL_CLOSED; later calls throw. */
  close(): void {
    if (this.currentState !== 'open') return;
    this.currentState = 'closed';
    this.rejectAll(new FlowctlClosedError('SendCredits'));
  }

  /** Fails every pending acquire with `err` (or ERR_FLOWCTL_CLOSED) and closes. */
  destroy(err?: Error): void {
    checkDestroyError(err);
    if (this.currentState === 'destroyed') return;
    const wasOpen = this.currentState === 'open';
    this.currentState = 'destroyed';
    if (wasOpen) this.rejectAll(err ?? new FlowctlClosedError('SendCredits'));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  stats(): SendCreditsStats {
    return {
      state: this.currentState,
      available: this.avail,
      outstanding: this.total - this.avail,
      reserved: this.reserved,
      consumed: this.consumed,
      consumedReserved: this.consumedReserved,
      granted: this.granted,
      lease: this.total,
      givenBack: this.givenBack,
      creditStalls: this.stalls,
      waiting: this.waiters.size,
      maxQueueDepth: this.maxDepth,
      timeBlockedMs: this.blockedMs,
      deadlineRejections: this.deadlines,
      abortRejections: this.aborts,
    };
  }

  private serve(): void {
    const now = this.clock.now();
    while (this.avail > this.reserved) {
      const w = this.waiters.shift();
      if (w === null) break;
      this.avail--;
      this.consumed++;
      this.blockedMs += now - w.enqueuedAt;
      w.resolve();
    }
    if (this.needDrain && this.waiters.size === 0 && this.avail > this.reserved) {
      this.needDrain = false;
      this.blockedMs += now - this.blockedSince;
      this.emit('drain');
    }
  }

  private fail(w: Waiter, err: FlowctlError): void {
    if (w.list !== this.waiters) return;
    this.waiters.remove(w);
    this.blockedMs += this.clock.now() - w.enqueuedAt;
    if (err.code === 'ERR_FLOWCTL_DEADLINE') this.deadlines++;
    else this.aborts++;
    w.reject(err);
    // The head may have left: the next waiter could be served now.
    this.serve();
  }

  private rejectAll(err: Error): void {
    const now = this.clock.now();
    for (let w = this.waiters.shift(); w !== null; w = this.waiters.shift()) {
      this.blockedMs += now - w.enqueuedAt;
      w.reject(err);
    }
    this.needDrain = false;
    this.needReserve = false;
  }

  private checkOpen(what: string): void {
    if (this.currentState !== 'open') throw new FlowctlClosedError(`SendCredits.${what}`);
  }
}

const RESOLVED: Promise<void> = Promise.resolve();

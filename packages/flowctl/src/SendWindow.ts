// Over 500 lines on purpose: one state machine (window, shared budget, fair queue of
// waiting sends, deadlines and aborts) whose transitions must be read together.
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
  type BudgetClient,
  kAdmit,
  kDetach,
  kDispatchSelected,
  kEnqueue,
  kGive,
  kMaybeDrain,
  kPump,
  kSelectedBytes,
  kTake,
  kWantDrain,
} from './internal/budgetLink.js';
import { ChannelQueue } from './internal/ChannelQueue.js';
import { Ring } from './internal/Ring.js';
import {
  checkClock,
  checkDestroyError,
  checkInt,
  checkNumber,
  describeValue,
  ownOptions,
} from './internal/validate.js';
import { acquireOptions, resolveDeadline, Waiter, type WaiterOwner } from './internal/Waiter.js';
import type { SharedBudget } from './SharedBudget.js';

export interface SendWindowOptions {
  /** Outstanding (sent, not completed) bytes allowed on this connection. */
  maxBytes: number;
  /** Outstanding messages allowed on this connection. */
  maxMessages: number;
  /** A budget shared with other windows of the process or device. */
  budget?: SharedBudget;
  clock?: Clock;
  /** Deficit-round-robin quantum between channels, in bytes. Default 16 KiB. */
  quantumBytes?: number;
  /** Deadline of an `acquire` that names none. Default 30 000 ms. */
  defaultTimeoutMs?: number;
  /** Waiting sends beyond this are rejected with ERR_FLOWCTL_QUEUE_FULL. Default 4096. */
  maxQueued?: number;
}

export interface SendWaitOptions extends AcquireOptions {
  /** Logical channel the send belongs to; waiting sends are shared fairly across channels. */
  channel?: number;
}

export interface SendWindowStats {
  readonly state: SendWindowState;
  readonly bytesInFlight: number;
  readonly messagesInFlight: number;
  readonly maxBytesInFlight: number;
  readonly maxMessagesInFlight: number;
  readonly queued: number;
  readonly queuedBytes: number;
  readonly maxQueueDepth: number;
  /** Sends that could not go at once because of this window (or queued sends ahead). */
  readonly windowStalls: number;
  /** Sends that could not go at once because of the shared budget. */
  readonly budgetStalls: number;
  /** Total time senders spent blocked (queued acquires and refused tryAcquire until drain). */
  readonly timeBlockedMs: number;
  readonly sent: number;
  readonly deadlineRejections: number;
  readonly abortRejections: number;
  readonly queueFullRejections: number;
}

export type SendWindowState = 'open' | 'closed' | 'destroyed';

interface SendWindowEvents {
  drain: [];
}

/**
 * A software send window for one connection: at most `maxBytes` and `maxMessages`
 * outstanding, and, with a `budget`, within the budget shared with other connections.
 * Space is taken before a send (`tryAcquire` / `acquire`) and given back when the send
 * completes (`release`).
 *
 * Waiting sends queue per channel and are served by deficit round-robin by bytes, so a
 * channel of large messages and a channel of small ones get the same bytes per round and
 * neither starves. The chosen send waits for space rather than letting smaller ones pass.
 *
 * Backpressure the undici way: `tryAcquire` returns false and `'drain'` follows when a send
 * of that size would fit; or await `acquire(bytes, { channel, timeoutMs, signal })`.
 */
export class SendWindow extends EventEmitter<SendWindowEvents> implements BudgetClient {
  readonly maxBytes: number;
  readonly maxMessages: number;
  private readonly budget: SharedBudget | undefined;
  private readonly clock: Clock;
  private readonly quantum: number;
  private readonly defaultTimeoutMs: number;
  private readonly maxQueued: number;
  private readonly owner: WaiterOwner;
  private readonly channels = new Map<number, ChannelQueue>();
  private readonly active = new Ring<ChannelQueue>();
  private currentState: SendWindowState = 'open';
  private selected: Waiter | null = null;
  private pumping = false;
  private bytes = 0;
  private messages = 0;
  private queuedCount = 0;
  private queuedBytesSum = 0;
  private needDrain = false;
  private drainBytes = 0;
  private blockedSince = 0;
  private maxBytesSeen = 0;
  private maxMessagesSeen = 0;
  private maxDepth = 0;
  private windowStalls = 0;
  private budgetStalls = 0;
  private blockedMs = 0;
  private sent = 0;
  private deadlines = 0;
  private aborts = 0;
  private queueFull = 0;

  constructor(opts: SendWindowOptions) {
    super();
    const options = ownOptions('SendWindow options', opts) as Partial<SendWindowOptions>;
    this.maxBytes = checkInt('maxBytes', options.maxBytes, 1);
    this.maxMessages = checkInt('maxMessages', options.maxMessages, 1);
    const budget = options.budget as Partial<SharedBudget> | null | undefined;
    if (
      budget !== undefined &&
      (budget === null || typeof budget !== 'object' || typeof budget[kAdmit] !== 'function')
    ) {
      throw new FlowctlError(
        'ERR_FLOWCTL_INVALID_ARG',
        `budget must be a SharedBudget, got ${describeValue(budget)}`,
      );
    }
    this.budget = budget as SharedBudget | undefined;
    this.clock = checkClock(options.clock) ?? systemClock;
    this.quantum = checkInt('quantumBytes', options.quantumBytes ?? 16 * 1024, 1);
    this.defaultTimeoutMs = checkNumber('defaultTimeoutMs', options.defaultTimeoutMs ?? 30_000, 0);
    this.maxQueued = checkInt('maxQueued', options.maxQueued ?? 4096, 0);
    this.owner = {
      waiterExpired: (w) => this.fail(w, new FlowctlDeadlineError('SendWindow', w.deadline)),
      waiterAborted: (w) => this.fail(w, new FlowctlAbortError('SendWindow', w.abortReason())),
    };
  }

  get state(): SendWindowState {
    return this.currentState;
  }

  get bytesInFlight(): number {
    return this.bytes;
  }

  get messagesInFlight(): number {
    return this.messages;
  }

  /** Sends waiting in `acquire`. */
  get queued(): number {
    return this.queuedCount;
  }

  /** The largest message this window (and its budget) can ever carry. */
  get maxMessageBytes(): number {
    return this.budget === undefined
      ? this.maxBytes
      : Math.min(this.maxBytes, this.budget.maxBytes);
  }

  /**
   * Takes space for one message of `bytes` now. False when it does not fit, or when sends
   * are queued ahead (no queue jumping); `'drain'` follows once it would fit. Throws
   * ERR_FLOWCTL_TOO_LARGE for a message larger than the whole window or budget.
   */
  tryAcquire(bytes: number): boolean {
    this.checkOpen('tryAcquire');
    this.checkBytes(bytes);
    if (this.queuedCount === 0 && this.fitsLocal(bytes)) {
      if (this.budget === undefined || this.budget[kAdmit](bytes)) {
        this.take(bytes);
        return true;
      }
      this.budgetStalls++;
    } else {
      this.windowStalls++;
    }
    if (!this.needDrain) {
      this.needDrain = true;
      this.blockedSince = this.clock.now();
    }
    if (bytes > this.drainBytes) this.drainBytes = bytes;
    this.budget?.[kWantDrain](this);
    return false;
  }

  /**
   * Waits for space for one message of `bytes` on `channel` (default 0). Resolves once the
   * space is taken; rejects with ERR_FLOWCTL_DEADLINE, ERR_FLOWCTL_ABORTED,
   * ERR_FLOWCTL_QUEUE_FULL or ERR_FLOWCTL_CLOSED. Throws synchronously on bad input.
   */
  acquire(bytes: number, opts?: SendWaitOptions): Promise<void> {
    this.checkOpen('acquire');
    this.checkBytes(bytes);
    const options = acquireOptions(opts);
    const channel = checkInt('channel', options?.channel ?? 0, 0, 0xffffffff);
    const deadline = resolveDeadline(this.clock, options, this.defaultTimeoutMs);
    if (this.queuedCount === 0 && this.fitsLocal(bytes)) {
      if (this.budget === undefined || this.budget[kAdmit](bytes)) {
        this.take(bytes);
        return RESOLVED;
      }
      this.budgetStalls++;
    } else {
      this.windowStalls++;
    }
    const signal = options?.signal as AbortSignal | undefined;
    if (signal?.aborted === true) {
      this.aborts++;
      return Promise.reject(new FlowctlAbortError('SendWindow', signal.reason));
    }
    if (this.queuedCount >= this.maxQueued) {
      this.queueFull++;
      return Promise.reject(
        new FlowctlError('ERR_FLOWCTL_QUEUE_FULL', 'SendWindow: too many waiting sends', {
          retryable: true,
        }),
      );
    }
    const now = this.clock.now();
    if (deadline <= now) {
      this.deadlines++;
      return Promise.reject(new FlowctlDeadlineError('SendWindow', deadline));
    }
    let ch = this.channels.get(channel);
    if (ch === undefined) {
      ch = new ChannelQueue(channel);
      this.channels.set(channel, ch);
    }
    const w = new Waiter(bytes, now, deadline);
    w.tag = ch;
    ch.waiters.push(w);
    if (!ch.inRing) {
      ch.inRing = true;
      this.active.push(ch);
    }
    this.queuedCount++;
    this.queuedBytesSum += bytes;
    if (this.queuedCount > this.maxDepth) this.maxDepth = this.queuedCount;
    w.arm(this.clock, this.owner, signal);
    this.pump();
    return w.promise;
  }

  /**
   * One message of `bytes` completed (or was abandoned): its space returns to the window and
   * the budget. Throws ERR_FLOWCTL_INVALID_ARG for more than is outstanding. Allowed after
   * `close()` so outstanding sends can finish; ignored after `destroy()`.
   */
  release(bytes: number): void {
    if (this.currentState === 'destroyed') return;
    checkInt('bytes', bytes, 0, this.bytes);
    if (this.messages === 0) {
      throw new FlowctlError('ERR_FLOWCTL_INVALID_ARG', 'SendWindow.release: no message in flight');
    }
    // Bytes left over with no message would shrink the window (and the budget) for good.
    if (this.messages === 1 && bytes !== this.bytes) {
      throw new FlowctlError(
        'ERR_FLOWCTL_INVALID_ARG',
        `SendWindow.release: the last message in flight holds ${this.bytes} bytes, got ${bytes}`,
      );
    }
    this.bytes -= bytes;
    this.messages--;
    this.budget?.[kGive](bytes, 1);
    this.pump();
    this[kMaybeDrain]();
  }

  /**
   * Idempotent and graceful: rejects waiting sends with ERR_FLOWCTL_CLOSED; new acquires
   * throw; outstanding sends may still `release`.
   */
  close(): void {
    if (this.currentState !== 'open') return;
    this.currentState = 'closed';
    this.rejectAll(new FlowctlClosedError('SendWindow'));
  }

  /**
   * Fails every waiting send with `err` (or ERR_FLOWCTL_CLOSED) and gives this window's
   * outstanding space back to the shared budget: those sends will never complete.
   */
  destroy(err?: Error): void {
    checkDestroyError(err);
    if (this.currentState === 'destroyed') return;
    const wasOpen = this.currentState === 'open';
    this.currentState = 'destroyed';
    if (wasOpen) this.rejectAll(err ?? new FlowctlClosedError('SendWindow'));
    const bytes = this.bytes;
    const messages = this.messages;
    this.bytes = 0;
    this.messages = 0;
    if (messages > 0 || bytes > 0) this.budget?.[kGive](bytes, messages);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  stats(): SendWindowStats {
    return {
      state: this.currentState,
      bytesInFlight: this.bytes,
      messagesInFlight: this.messages,
      maxBytesInFlight: this.maxBytesSeen,
      maxMessagesInFlight: this.maxMessagesSeen,
      queued: this.queuedCount,
      queuedBytes: this.queuedBytesSum,
      maxQueueDepth: this.maxDepth,
      windowStalls: this.windowStalls,
      budgetStalls: this.budgetStalls,
      timeBlockedMs: this.blockedMs,
      sent: this.sent,
      deadlineRejections: this.deadlines,
      abortRejections: this.aborts,
      queueFullRejections: this.queueFull,
    };
  }

  /** @internal Budget link: bytes of the next send if it fits this window, else -1. */
  [kSelectedBytes](): number {
    if (this.isFull()) return -1;
    const w = this.select();
    return w !== null && this.fitsLocal(w.bytes) ? w.bytes : -1;
  }

  /** @internal Budget link: dispatch the selected send. */
  [kDispatchSelected](): void {
    const w = this.select();
    if (w !== null) this.dispatch(w);
  }

  /** @internal Budget link (and release): emit 'drain' when a refused size would now fit. */
  [kMaybeDrain](): boolean {
    if (!this.needDrain) return true;
    if (this.currentState !== 'open') {
      this.needDrain = false;
      return true;
    }
    if (this.queuedCount > 0 || !this.fitsLocal(this.drainBytes)) return false;
    if (this.budget !== undefined && !this.budget[kAdmit](this.drainBytes)) return false;
    this.needDrain = false;
    this.drainBytes = 0;
    this.blockedMs += this.clock.now() - this.blockedSince;
    this.emit('drain');
    return true;
  }

  private fitsLocal(bytes: number): boolean {
    return this.messages < this.maxMessages && bytes <= this.maxBytes - this.bytes;
  }

  /** No send of any size can go until something completes. */
  private isFull(): boolean {
    return this.messages >= this.maxMessages || this.bytes >= this.maxBytes;
  }

  private take(bytes: number): void {
    this.bytes += bytes;
    this.messages++;
    this.sent++;
    if (this.bytes > this.maxBytesSeen) this.maxBytesSeen = this.bytes;
    if (this.messages > this.maxMessagesSeen) this.maxMessagesSeen = this.messages;
    this.budget?.[kTake](bytes);
  }

  /** Dispatches queued sends while they fit the window and the budget. */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      // Choosing while nothing can go would hand rounds to whoever queued first.
      while (!this.isFull()) {
        const w = this.select();
        if (w === null || !this.fitsLocal(w.bytes)) break;
        if (this.budget !== undefined && !this.budget[kAdmit](w.bytes)) {
          this.budget[kEnqueue](this);
          break;
        }
        this.dispatch(w);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Deficit round-robin across channels; the choice sticks until sent or withdrawn. */
  private select(): Waiter | null {
    const sel = this.selected;
    if (sel !== null && sel.list !== null) return sel;
    this.selected = null;
    let idle = 0;
    for (;;) {
      const ch = this.active.peek();
      if (ch === undefined) return null;
      const head = ch.waiters.head;
      if (head === null) {
        // An idle channel keeps no state (and no map entry): ids may be many and short-lived.
        this.active.shift();
        ch.inRing = false;
        this.channels.delete(ch.id);
        idle = 0;
        continue;
      }
      if (!ch.turn) {
        ch.deficit += this.quantum;
        ch.turn = true;
      }
      if (head.bytes <= ch.deficit) {
        this.selected = head;
        return head;
      }
      ch.turn = false;
      this.active.rotate();
      idle++;
      if (idle >= this.active.size) {
        this.skipAhead();
        idle = 0;
      }
    }
  }

  /** Every active channel had a turn and none could send: grant the rounds nobody would use. */
  private skipAhead(): void {
    let rounds = Number.POSITIVE_INFINITY;
    for (let i = 0; i < this.active.size; i++) {
      const ch = this.active.at(i) as ChannelQueue;
      const head = ch.waiters.head;
      if (head === null) return;
      const need = Math.ceil((head.bytes - ch.deficit) / this.quantum);
      if (need < rounds) rounds = need;
    }
    if (!Number.isFinite(rounds) || rounds <= 1) return;
    const extra = (rounds - 1) * this.quantum;
    for (let i = 0; i < this.active.size; i++) (this.active.at(i) as ChannelQueue).deficit += extra;
  }

  private dispatch(w: Waiter): void {
    const ch = w.tag as ChannelQueue;
    ch.deficit -= w.bytes;
    this.unqueue(w);
    this.take(w.bytes);
    this.blockedMs += this.clock.now() - w.enqueuedAt;
    w.resolve();
  }

  private unqueue(w: Waiter): void {
    const ch = w.tag as ChannelQueue;
    ch.waiters.remove(w);
    if (this.selected === w) this.selected = null;
    this.queuedCount--;
    this.queuedBytesSum -= w.bytes;
  }

  private fail(w: Waiter, err: FlowctlError): void {
    if (w.list === null) return;
    this.unqueue(w);
    this.blockedMs += this.clock.now() - w.enqueuedAt;
    if (err.code === 'ERR_FLOWCTL_DEADLINE') this.deadlines++;
    else this.aborts++;
    w.reject(err);
    // The send that held the line may have left: the next may fit now, here or in
    // another window queued on the budget behind this one.
    this.pump();
    this.budget?.[kPump]();
    this[kMaybeDrain]();
  }

  private rejectAll(err: Error): void {
    const now = this.clock.now();
    for (const ch of this.channels.values()) {
      for (let w = ch.waiters.head; w !== null; w = ch.waiters.head) {
        this.unqueue(w);
        this.blockedMs += now - w.enqueuedAt;
        w.reject(err);
      }
    }
    this.channels.clear();
    while (this.active.size > 0) this.active.shift();
    this.needDrain = false;
    this.budget?.[kDetach](this);
  }

  private checkBytes(bytes: number): void {
    checkInt('bytes', bytes, 0);
    if (bytes > this.maxMessageBytes) {
      throw new FlowctlError(
        'ERR_FLOWCTL_TOO_LARGE',
        `a ${bytes}-byte message can never fit a window of ${this.maxMessageBytes} bytes`,
      );
    }
  }

  private checkOpen(what: string): void {
    if (this.currentState !== 'open') throw new FlowctlClosedError(`SendWindow.${what}`);
  }
}

const RESOLVED: Promise<void> = Promise.resolve();

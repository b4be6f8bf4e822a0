import { EventEmitter } from 'node:events';
import { RdmaError } from './errors.js';
import { ABI } from './internal/abi.js';
import { Resource } from './internal/lifecycle.js';
import type { NativeDevice } from './internal/native.js';
import { checkCreate, type kCreate, kHandle, kLoopFed, kNotify, kUse } from './internal/symbols.js';
import {
  checkBoolean,
  checkInt,
  checkNumber,
  describe,
  invalid,
  isPlainObject,
  MAX_TIMEOUT_MS,
  readOptions,
} from './internal/validate.js';
import type { WorkCompletion } from './types.js';
import { fillCompletion } from './WorkCompletions.js';

export interface CompletionWaitOptions {
  /**
   * Give up after this long with ERR_RDMA_TIMEOUT, 0..2^31−1 ms. Every wait has a
   * deadline: default 30 000.
   */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Busy-poll this long before sleeping on the event (adaptive polling), 0..10^6. Default 50. */
  spinUs?: number;
  /**
   * Sleep until a solicited completion (the receive of a SEND or RDMA_WRITE_WITH_IMM posted
   * `solicited`) or a failed one arrives, not any completion (ibv_req_notify_cq's
   * solicited_only). Completions already there still end the wait at once; such a wait does
   * not spin (a spin would end at any completion). Default false.
   */
  solicitedOnly?: boolean;
}

export interface NotifyOptions {
  /** Arm for the next solicited or failed completion only (ibv_req_notify_cq solicited_only). */
  solicitedOnly?: boolean;
}

export const DEFAULT_WAIT_MS = 30_000;
/** The spin of a wait that names none, in µs (adaptive: see waitForCompletion). */
const DEFAULT_SPIN_US = 50;
/** Default spins in a row that found nothing before the spin is skipped. */
const SPIN_MISSES = 8;
/** While skipped, every SPIN_PROBE-th wait spins again (a power of two). */
const SPIN_PROBE = 16;
/** Waits that sleep without the look after a yield, after a slow yield. */
const YIELD_BACKOFF = 256;

export type CqAsyncEvent = { type: 'CQ_ERR'; error: RdmaError };

const RECORD_WORDS = ABI.WC_WORDS;

const RESOLVED: Promise<void> = Promise.resolve();
const WAIT_KEYS = ['timeoutMs', 'signal', 'spinUs', 'solicitedOnly'] as const;
const NOTIFY_KEYS = ['solicitedOnly'] as const;

/**
 * `requestNotify(NOTIFY_SOLICITED_ONLY)` arms for solicited completions without reading an
 * options object per call (frozen, so it is checked once, here): for code that re-arms per
 * wake-up.
 */
export const NOTIFY_SOLICITED_ONLY: Readonly<NotifyOptions> = Object.freeze({
  solicitedOnly: true,
});

const kRemoveWaiter: unique symbol = Symbol('rdmajs.removeWaiter');

/**
 * One sleeping wait: a pooled record (no closures per wait). It is its signal's listener
 * itself (handleEvent), so a signal costs no closure either.
 */
class Waiter {
  cq: CompletionQueue | undefined;
  resolve: (() => void) | undefined;
  reject: ((err: Error) => void) | undefined;
  deadline = 0;
  timeoutMs = 0;
  signal: AbortSignal | undefined;

  settle(err: Error | undefined): void {
    const { resolve, reject, signal } = this;
    if (signal !== undefined) signal.removeEventListener('abort', this);
    this.cq = this.resolve = this.reject = this.signal = undefined;
    if (WAITER_POOL.length < 64) WAITER_POOL.push(this);
    if (err === undefined) resolve?.();
    else reject?.(err);
  }

  handleEvent(): void {
    const cq = this.cq;
    if (cq === undefined) return;
    const reason = this.signal?.reason;
    cq[kRemoveWaiter](this);
    this.settle(new RdmaError('ERR_RDMA_TIMEOUT', 'wait aborted', { cause: reason }));
  }
}

const WAITER_POOL: Waiter[] = [];
let PENDING: Waiter | undefined;
function capture(resolve: () => void, reject: (err: Error) => void): void {
  const w = PENDING as Waiter;
  PENDING = undefined;
  w.resolve = resolve;
  w.reject = reject;
}

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
  /** An outstanding arm asks for any completion (else: solicited or failed ones only). */
  #notifyAny = false;
  /** Tells the device a wake-up is (+1) or is no longer (−1) awaited here (Device#keep). */
  readonly #keep: (delta: number) => void;
  #users = 0;
  /** 'completion' listeners: a wake-up with none emits nothing (an emit call per wake-up). */
  #completionListeners = 0;
  /** users whose completions come only through this event loop (soft over the TCP link) */
  #loopFed = 0;
  /** default spins in a row that found nothing (capped at SPIN_MISSES), and waits since */
  #spinMisses = 0;
  #spinSkips = 0;
  /** waits left before one may yield again (soft), after a yield that took a time slice */
  #yieldOff = 0;
  #overrun = false;
  /**
   * Loop-fed CQs (every user's completions come through this event loop): a poll that finds
   * none arms the CQ in its own crossing while the caller's habit is to wait right after an
   * empty poll (#pollArms: a wait followed one; off after two empty polls with no wait
   * between), and that wait then needs no armCq crossing (#armedByPoll: armed for any
   * completion by the last poll, and nothing delivered, polled or re-armed since).
   */
  #pollArms = false;
  #emptyPolled = false;
  #armedByPoll = false;
  #waiters: Waiter[] = [];
  #spare: Waiter[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = 0;

  /** Completion queues come from `device.createCq()`. */
  constructor(
    key: typeof kCreate,
    parent: Resource,
    native: NativeDevice,
    handle: number,
    registry: Map<number, CompletionQueue>,
    keep: (delta: number) => void = () => undefined,
  ) {
    checkCreate(key, 'device.createCq()');
    super(parent);
    this.#native = native;
    this.#handle = handle;
    this.#registry = registry;
    this.#keep = keep;
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
    // A record must take writes: storing a field's own value back is the check (a frozen
    // record throws in strict code), a plain store where Object.isFrozen was a runtime call
    // per record and cost as much as the native poll itself.
    let i = 0;
    try {
      for (; i < n; i++) {
        const wc = out[i] as WorkCompletion;
        if (wc === null || typeof wc !== 'object') break;
        // biome-ignore lint/correctness/noSelfAssign: the store itself is the check
        wc.wrId = wc.wrId;
      }
    } catch {
      // not writable: reported below
    }
    if (i < n) throw invalid(`out[${i}] must be a writable completion record (allocCompletions())`);
    if (this.#raw.length < n * RECORD_WORDS) this.#raw = new Float64Array(n * RECORD_WORDS);
    // Nothing can arrive on a loop-fed CQ between this poll and a wait in the same job, and
    // anything arriving later uses the arm up and is delivered ('ready'), which disowns it.
    // Not while a wake-up is requested: that one's arm (solicited-only, maybe) stays as it is.
    const arm =
      this.#pollArms &&
      !this.#notifyRequested &&
      n > 0 &&
      this.#users > 0 &&
      this.#loopFed === this.#users;
    const r = this.#native.pollCq(this.#handle, this.#raw, n, arm ? 1 : 0);
    // Armed only when the poll says so (0): POLL_NOT_ARMED took none and left it unarmed.
    this.#armedByPoll = arm && r === 0;
    const got = r === ABI.POLL_NOT_ARMED ? 0 : r;
    if (got === 0) {
      if (this.#emptyPolled) this.#pollArms = false; // polled again instead of waiting
      this.#emptyPolled = true;
    } else this.#emptyPolled = false;
    for (let i = 0; i < got; i++)
      fillCompletion(out[i] as WorkCompletion, this.#raw, i * RECORD_WORDS);
    return got;
  }

  /** Completions waiting to be polled. */
  pending(): number {
    this.assertOpen();
    return this.#native.cqCount(this.#handle);
  }

  /**
   * Arms a one-shot `'completion'` event for the next completion (ibv_req_notify_cq), or with
   * `solicitedOnly` for the next solicited or failed one. Completions already there are
   * notified at once. Armed both ways before the event, any completion fires it.
   */
  requestNotify(options?: NotifyOptions): void {
    this.assertOpen();
    let solicitedOnly = false;
    if (options === NOTIFY_SOLICITED_ONLY) solicitedOnly = true;
    else if (options !== undefined && options !== null) {
      const o = readOptions('requestNotify options', options, NOTIFY_KEYS);
      if (o.solicitedOnly !== undefined)
        solicitedOnly = checkBoolean('solicitedOnly', o.solicitedOnly);
    }
    this.#request(solicitedOnly);
    this.#armedByPoll = false;
    if (this.#native.armCq(this.#handle, this.#notifyAny ? 0 : 1) > 0) {
      // Already there: ibverbs would not notify, which loses the wake-up; we do.
      queueMicrotask(this.#deliverTask);
    }
  }

  /** A wake-up is now awaited here (one device hold per CQ, whatever the number of waits). */
  #request(solicitedOnly: boolean): void {
    if (!solicitedOnly) this.#notifyAny = true;
    if (!this.#notifyRequested) {
      this.#notifyRequested = true;
      this.#keep(1);
    }
  }

  on(event: 'completion', listener: () => void): this;
  on(event: 'asyncEvent', listener: (e: CqAsyncEvent) => void): this;
  on(event: 'completion' | 'asyncEvent', listener: (...args: never[]) => void): this {
    this.#emitter.on(checkEvent(event), listener as (...args: unknown[]) => void);
    this.#completionListeners = this.#emitter.listenerCount('completion');
    return this;
  }

  off(event: 'completion', listener: () => void): this;
  off(event: 'asyncEvent', listener: (e: CqAsyncEvent) => void): this;
  off(event: 'completion' | 'asyncEvent', listener: (...args: never[]) => void): this {
    this.#emitter.off(checkEvent(event), listener as (...args: unknown[]) => void);
    this.#completionListeners = this.#emitter.listenerCount('completion');
    return this;
  }

  /** Resolves when poll() would return at least one completion. */
  waitForCompletion(options?: CompletionWaitOptions): Promise<void> {
    this.assertOpen();
    let timeoutMs = DEFAULT_WAIT_MS;
    let spinUs = DEFAULT_SPIN_US;
    // The default spin adapts (below); a spinUs given is spun as asked.
    let adaptive = true;
    let signal: AbortSignal | undefined;
    let solicitedOnly = false;
    if (options === NOTIFY_SOLICITED_ONLY) solicitedOnly = true;
    else if (options !== undefined && options !== null) {
      // The common case checked without allocating (no key list, no copy); anything odd
      // goes through readOptions for its error.
      if (!isPlainObject(options)) readOptions('waitForCompletion options', options, WAIT_KEYS);
      // Known keys by string compares (no Object.hasOwn, no list search per key): only an
      // unknown key asks whether it is the object's own, and readOptions throws for it.
      for (const k in options)
        if (
          k !== 'timeoutMs' &&
          k !== 'spinUs' &&
          k !== 'signal' &&
          k !== 'solicitedOnly' &&
          Object.hasOwn(options, k)
        )
          readOptions('waitForCompletion options', options, WAIT_KEYS);
      const o = options as Record<string, unknown>;
      if (o.timeoutMs != null) timeoutMs = checkNumber('timeoutMs', o.timeoutMs, 0, MAX_TIMEOUT_MS);
      if (o.spinUs != null) {
        spinUs = checkNumber('spinUs', o.spinUs, 0, 1e6);
        adaptive = false;
      }
      if (o.solicitedOnly != null) solicitedOnly = checkBoolean('solicitedOnly', o.solicitedOnly);
      const sig = o.signal;
      if (sig != null) {
        if (!(sig instanceof AbortSignal))
          throw invalid(`signal must be an AbortSignal, got ${describe(sig)}`);
        signal = sig;
      }
    }
    // A spin holds the event loop: when every QP on this CQ is fed through that loop (the
    // TCP link's sockets are read there), nothing can arrive while it spins.
    // The default spin stops paying when the completion keeps coming after it (a busy
    // machine: the peer is not running while we spin, and the spin takes its CPU): after
    // SPIN_MISSES spins in a row that found nothing it is skipped, tried again every
    // SPIN_PROBE-th wait, and back as soon as one finds a completion.
    // A solicited-only wait does not spin: any completion (its own sends') would end it.
    const mayLook = !solicitedOnly && (this.#users === 0 || this.#loopFed < this.#users);
    if (
      spinUs > 0 &&
      mayLook &&
      (!adaptive || this.#spinMisses < SPIN_MISSES || (++this.#spinSkips & (SPIN_PROBE - 1)) === 0)
    ) {
      // Found: one shared settled promise, nothing allocated. A 'completion' listener armed
      // earlier is owed its event (the doorbell it rang finds the CQ drained by then).
      if (this.#spin(spinUs)) {
        this.#spinMisses = 0;
        if (this.#notifyRequested) queueMicrotask(this.#deliverTask);
        return RESOLVED;
      }
      if (adaptive && this.#spinMisses < SPIN_MISSES) this.#spinMisses++;
    } else if (
      mayLook &&
      this.#native.spinCq !== undefined &&
      this.#yieldOk() &&
      this.#lookAfterYield(this.#native.spinCq) > 0
    ) {
      // About to sleep (soft): the core is given up once first. The peer queued on it may
      // answer meanwhile, and then no sleep and wake-up (a context switch each) is paid. A
      // 'completion' listener armed earlier is owed its event, as #arm would deliver it.
      if (this.#notifyRequested) queueMicrotask(this.#deliverTask);
      return RESOLVED;
    }
    if (signal?.aborted)
      return Promise.reject(
        new RdmaError('ERR_RDMA_TIMEOUT', 'wait aborted', { cause: signal.reason }),
      );
    // A wait right after an empty poll: poll from now on arms (loop-fed CQs, see #pollArms).
    if (this.#emptyPolled && !solicitedOnly) this.#pollArms = true;
    this.#emptyPolled = false;
    // One crossing arms the CQ and counts what is already there (the count a wait without
    // a spin used to ask for separately, before arming) — none when the poll just before
    // armed it for any completion and nothing came since.
    if (!(this.#armedByPoll && !solicitedOnly) && this.#arm(solicitedOnly)) return RESOLVED;
    this.#armedByPoll = false;
    const w = WAITER_POOL.pop() ?? new Waiter();
    w.cq = this;
    w.deadline = performance.now() + timeoutMs;
    w.timeoutMs = timeoutMs;
    w.signal = signal;
    // The executor is one function for all waits: it fills the record taken just above.
    PENDING = w;
    const promise = new Promise<void>(capture);
    this.#waiters.push(w);
    if (signal !== undefined) signal.addEventListener('abort', w, { once: true });
    this.#armDeadline(w.deadline);
    this.#request(solicitedOnly);
    return promise;
  }

  /**
   * Spins up to `spinUs` µs for a completion; true when one is there. Soft spins natively in
   * one crossing and gives the core up once first (its same-host peer is often queued on this
   * core: a tight spin held the answer off until it ended).
   */
  #spin(spinUs: number): boolean {
    const native = this.#native;
    const h = this.#handle;
    // Soft's spin always gives the core up once: a tight spin on a loaded host held the
    // answer off (the backoff below is for the look before a sleep only). −1: a slow yield,
    // nothing found; −(n + 1) with n > 0: found.
    if (native.spinCq !== undefined) {
      const r = native.spinCq(h, spinUs, 1);
      return r > 0 || r < -1;
    }
    if (native.cqCount(h) > 0) return true;
    const spinUntil = performance.now() + spinUs / 1000;
    // The clock is read every 16 polls: each read is a heap number (GC per wait otherwise).
    for (let i = 1; ; i++) {
      if (native.cqCount(h) > 0) return true;
      if ((i & 15) === 0 && performance.now() >= spinUntil) return false;
    }
  }

  /** Whether a wait about to sleep may look after a yield (not while backed off). */
  #yieldOk(): boolean {
    if (this.#yieldOff === 0) return true;
    this.#yieldOff--;
    return false;
  }

  /**
   * Soft, a wait about to sleep: one look after giving the core up once; the count. A yield
   * that took long handed the core to another process for its whole time slice (the peer
   * answers in microseconds; spinCq says so natively, no clock read here): looks stop for
   * YIELD_BACKOFF waits, so such stalls stay out of the tail.
   */
  #lookAfterYield(spinCq: (handle: number, us: number, yieldFirst: number) => number): number {
    const n = spinCq(this.#handle, 0, 1);
    if (n >= 0) return n;
    this.#yieldOff = YIELD_BACKOFF;
    return -n - 1;
  }

  /**
   * Arms the CQ natively; true when completions are already there (the arm is used up:
   * soft disarms it, so no peer rings for nothing). A 'completion' listener armed earlier
   * is then owed its event, as requestNotify would deliver it.
   */
  #arm(solicitedOnly: boolean): boolean {
    this.#armedByPoll = false;
    const any = this.#notifyAny || !solicitedOnly;
    if (this.#native.armCq(this.#handle, any ? 0 : 1) === 0) return false;
    if (this.#notifyRequested) queueMicrotask(this.#deliverTask);
    return true;
  }

  // One deadline timer per CQ, armed for the earliest deadline of its waiters. Waits with
  // the same timeout end in order, so it is re-armed only when it fires (not per wait).
  #armDeadline(deadline: number): void {
    if (this.#timer !== undefined && this.#timerAt <= deadline) {
      this.#timer.ref();
      return;
    }
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timerAt = deadline;
    this.#timer = setTimeout(
      this.#onDeadline,
      Math.max(0, Math.ceil(deadline - performance.now())),
    );
  }

  readonly #onDeadline = (): void => {
    this.#timer = undefined;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    const ws = this.#waiters;
    let keep = 0;
    const expired: Waiter[] = [];
    for (const w of ws) {
      // libuv's clock is coarser than performance.now(): a timer may fire up to 1 ms early.
      if (w.deadline <= now + 1) expired.push(w);
      else {
        ws[keep++] = w;
        if (w.deadline < next) next = w.deadline;
      }
    }
    ws.length = keep;
    if (keep > 0) this.#armDeadline(next);
    for (const w of expired)
      w.settle(
        new RdmaError('ERR_RDMA_TIMEOUT', `no completion within ${w.timeoutMs} ms`, {
          retryable: true,
        }),
      );
  };

  /** @internal an aborted waiter leaves */
  [kRemoveWaiter](w: Waiter): void {
    const i = this.#waiters.indexOf(w);
    if (i >= 0) this.#waiters.splice(i, 1);
    if (this.#waiters.length === 0) this.#timer?.unref();
  }

  /** @internal notifications from the device */
  [kNotify](what: 'doorbell' | 'ready' | 'overrun'): void {
    if (this.closed) return;
    this.#armedByPoll = false; // a delivery used the arm up (or found it used)
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
    // Soft checked the count and used up the arm natively ('ready'). An ibverbs doorbell
    // used up the arm, and a poll that ran first may have taken the completion: re-arm and
    // count, so the next one must still wake us.
    if (what === 'ready') this.#deliver();
    else if (this.#notifyRequested && this.#native.armCq(this.#handle, this.#notifyAny ? 0 : 1) > 0)
      this.#deliver();
  }

  /** @internal a QP or SRQ starts or stops using this CQ */
  [kUse](delta: number): void {
    this.#users += delta;
    this.#armedByPoll = this.#pollArms = false;
  }

  /** @internal a QP's completions start or stop coming only through the event loop */
  [kLoopFed](delta: number): void {
    this.#loopFed += delta;
    this.#armedByPoll = this.#pollArms = false;
  }

  readonly #deliverTask = (): void => this.#deliver();

  #deliver(): void {
    if (!this.#notifyRequested || this.closed) return;
    this.#notifyRequested = false;
    this.#notifyAny = false;
    this.#keep(-1);
    this.#settleAll(undefined);
    if (this.#completionListeners > 0) this.#emitter.emit('completion');
  }

  #settleAll(err: Error | undefined): void {
    const ws = this.#waiters;
    if (ws.length === 0) return;
    // Swapped, not copied: a waiter settled here may wait again (it runs later, in a
    // microtask, but a 'completion' listener may wait synchronously).
    this.#waiters = this.#spare;
    this.#spare = ws;
    for (const w of ws) w.settle(err);
    // Emptied by pops (inlined), not `length = 0` (a runtime call per wake-up).
    while (ws.length > 0) ws.pop();
    if (this.#waiters.length === 0) this.#timer?.unref();
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
    if (this.#notifyRequested) {
      this.#notifyRequested = false;
      this.#notifyAny = false;
      this.#keep(-1);
    }
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#settleAll(new RdmaError('ERR_RDMA_CLOSED', 'completion queue closed while waiting'));
  }
}

function checkEvent(event: unknown): 'completion' | 'asyncEvent' {
  if (event !== 'completion' && event !== 'asyncEvent')
    throw invalid(`unknown event ${describe(event)}: 'completion' or 'asyncEvent'`);
  return event;
}

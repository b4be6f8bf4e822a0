import { setMaxListeners } from 'node:events';
import type { Channel, ChannelState, ReceiveOptions, SendOptions } from './Channel.js';
import type { Connection } from './Connection.js';
import { MuxAbortError, MuxClosedError, MuxDeadlineError, MuxError } from './errors.js';
import { InboundMessage, type OutboundMessage } from './Message.js';
import type { ChannelStats } from './Stats.js';
import type { WaitOptions } from './WaitOptions.js';
import { signalOf, timeoutOf } from './WaitOptions.js';

const ONCE = { once: true } as const;
/** Idle waiter records kept per channel. */
const WAITER_POOL_MAX = 8;

/**
 * A pending receive, reused across waits: its timer is restarted (`refresh()`) rather than
 * created when the timeout repeats, and a settled waiter's timer only unrefs, firing later as
 * a no-op. So a wait allocates nothing but its promise.
 */
class ReceiveWaiter {
  resolve: ((m: InboundMessage) => void) | undefined;
  reject: ((e: Error) => void) | undefined;
  copy = false;
  armed = false;
  timeoutMs = -1;
  timer: NodeJS.Timeout | undefined;
  signal: AbortSignal | undefined;
  readonly executor = (resolve: (m: InboundMessage) => void, reject: (e: Error) => void): void => {
    this.resolve = resolve;
    this.reject = reject;
  };
  readonly onTimeout: () => void;
  readonly onAbort: () => void;

  constructor(expire: (w: ReceiveWaiter) => void, abort: (w: ReceiveWaiter) => void) {
    this.onTimeout = () => {
      if (this.armed) expire(this);
    };
    this.onAbort = () => {
      if (this.armed) abort(this);
    };
  }

  arm(copy: boolean, timeoutMs: number, signal: AbortSignal | undefined): void {
    this.copy = copy;
    this.armed = true;
    this.signal = signal;
    if (this.timer !== undefined && this.timeoutMs === timeoutMs) {
      this.timer.ref();
      this.timer.refresh();
    } else {
      if (this.timer !== undefined) clearTimeout(this.timer);
      this.timer = setTimeout(this.onTimeout, timeoutMs);
      this.timeoutMs = timeoutMs;
    }
    signal?.addEventListener('abort', this.onAbort, ONCE);
  }

  /** Disarms; the caller then resolves or rejects with what it took. */
  settle(): void {
    this.armed = false;
    this.timer?.unref();
    if (this.signal !== undefined) {
      this.signal.removeEventListener('abort', this.onAbort);
      this.signal = undefined;
    }
  }

  succeed(m: InboundMessage): void {
    const res = this.resolve as (m: InboundMessage) => void;
    this.resolve = undefined;
    this.reject = undefined;
    res(m);
  }

  fail(e: Error): void {
    const rej = this.reject as (e: Error) => void;
    this.resolve = undefined;
    this.reject = undefined;
    rej(e);
  }

  drop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.timeoutMs = -1;
  }
}

/** What a channel needs of its connection. */
export interface ChannelHost extends Connection {
  readonly defaultTimeoutMs: number;
}

/**
 * The transport-independent half of a channel, one copy for every transport: the receive
 * queue (bounded by the connection's receive window, since queued messages stay unreleased),
 * receives with deadlines and AbortSignals (pooled waiters: a wait allocates only its
 * promise), graceful close that waits for pending sends within its deadline, failure, and
 * the counters. A transport subclasses it with `send()` and `closed()`, and calls `deliver`,
 * `peerClose`, `fail`, `finish`, `sendDone` and `giveUpSignal` from its connection.
 */
export abstract class ChannelCore<C extends ChannelHost = ChannelHost> implements Channel {
  readonly id: number;
  readonly name: string;
  readonly connection: C;
  #state: ChannelState = 'open';
  #error: Error | undefined;
  /** The peer sent Close: nothing more will arrive. */
  peerClosed = false;
  /** Next sequence numbers. */
  sendSeq = 0;
  recvSeq = 0;
  /** Sends between `send()` and their frame being written (close waits for them). */
  pendingSends = 0;
  #idle: (() => void) | undefined;
  /** Aborted when close() gives up the sends still waiting for the window. */
  #giveUp: AbortController | undefined;
  readonly #queue: InboundMessage[] = [];
  #head = 0;
  #queuedBytes = 0;
  /** Pending receives are #waiters[#wHead … #wTail): filled by index, never shrunk (no store churn). */
  readonly #waiters: (ReceiveWaiter | undefined)[] = [];
  #wHead = 0;
  #wTail = 0;
  readonly #idleWaiters: ReceiveWaiter[] = [];
  /** Set by listen(): messages go straight to it, never to the queue or a waiter. */
  #onMessage: ((m: InboundMessage) => void) | undefined;
  /** listen()'s end callback; cleared once called (it is called once). */
  #onEnd: ((err: Error) => void) | undefined;
  readonly #expire = (w: ReceiveWaiter): void => {
    this.#unwait(w);
    w.fail(new MuxDeadlineError(`receive on channel ${this.id}`, w.timeoutMs));
  };
  readonly #abort = (w: ReceiveWaiter): void => {
    const reason = w.signal?.reason;
    this.#unwait(w);
    w.fail(new MuxAbortError(`receive on channel ${this.id}`, reason));
  };
  messagesSent = 0;
  bytesSent = 0;
  messagesReceived = 0;
  bytesReceived = 0;
  sendStalls = 0;

  constructor(connection: C, id: number, name: string) {
    this.connection = connection;
    this.id = id;
    this.name = name;
  }

  abstract send(message: OutboundMessage, options?: SendOptions): Promise<void>;

  /** The channel closed on this side (after its pending sends): the transport tells the peer. */
  protected abstract closed(): void;

  get state(): ChannelState {
    return this.#state;
  }

  /** Sends are allowed. */
  get sendable(): boolean {
    return this.#state === 'open';
  }

  receive(options?: ReceiveOptions): Promise<InboundMessage> {
    const copy = options?.copy === true;
    let timeoutMs: number;
    let signal: AbortSignal | undefined;
    try {
      timeoutMs = timeoutOf(options, this.connection.defaultTimeoutMs);
      signal = signalOf(options);
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.#onMessage !== undefined) {
      return Promise.reject(
        new MuxError('ERR_MUX_INVALID_ARG', `channel ${this.id} has a listener: receive() is off`),
      );
    }
    if (this.#head < this.#queue.length) return Promise.resolve(this.#take(copy));
    if (this.#error !== undefined) return Promise.reject(this.#error);
    if (this.peerClosed || this.#state !== 'open') {
      return Promise.reject(new MuxClosedError(`channel ${this.id}`));
    }
    if (signal?.aborted === true)
      return Promise.reject(new MuxAbortError('receive', signal.reason));
    const w = this.#idleWaiters.pop() ?? new ReceiveWaiter(this.#expire, this.#abort);
    const p = new Promise<InboundMessage>(w.executor);
    w.arm(copy, timeoutMs, signal);
    this.#waiters[this.#wTail++] = w;
    return p;
  }

  listen(onMessage: (m: InboundMessage) => void, onEnd: (err: Error) => void): void {
    if (typeof onMessage !== 'function' || typeof onEnd !== 'function') {
      throw new MuxError('ERR_MUX_INVALID_ARG', 'listen needs two functions');
    }
    if (this.#onMessage !== undefined || this.#wHead !== this.#wTail) {
      throw new MuxError(
        'ERR_MUX_INVALID_ARG',
        `channel ${this.id} already has a listener or a pending receive`,
      );
    }
    this.#onMessage = onMessage;
    this.#onEnd = onEnd;
    // What arrived before goes first, in order; then the end if it came already.
    while (this.#head < this.#queue.length && this.#onMessage !== undefined) {
      this.#hand(this.#take(false));
    }
    if (this.#error !== undefined) this.#end(this.#error);
    else if (this.peerClosed || this.#state !== 'open') {
      this.#end(new MuxClosedError(`channel ${this.id}`));
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<InboundMessage> {
    for (;;) {
      try {
        yield await this.receive();
      } catch (err) {
        if ((err as { code?: string }).code === 'ERR_MUX_CLOSED') return;
        throw err;
      }
    }
  }

  async close(options?: WaitOptions): Promise<void> {
    const timeoutMs = timeoutOf(options, this.connection.defaultTimeoutMs);
    const signal = signalOf(options);
    if (this.#state !== 'open') return;
    this.#state = 'closing';
    this.#discardQueue();
    this.#endWaiters(new MuxClosedError(`channel ${this.id}`));
    let late: Error | undefined;
    if (this.pendingSends > 0) {
      // Sends still waiting for the window past the deadline (or abort) are given up: they
      // fail with ERR_MUX_CLOSED once the channel is closed, and nothing of them is sent.
      await new Promise<void>((resolve) => {
        const done = (err?: Error) => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
          this.#idle = undefined;
          late = err;
          if (err !== undefined) this.#giveUp?.abort(err);
          resolve();
        };
        const timer = setTimeout(
          () => done(new MuxDeadlineError(`close of channel ${this.id}`, timeoutMs)),
          timeoutMs,
        );
        const onAbort = () =>
          done(new MuxAbortError(`close of channel ${this.id}`, signal?.reason));
        this.#idle = () => done();
        if (signal?.aborted === true) onAbort();
        else signal?.addEventListener('abort', onAbort, { once: true });
      });
    }
    if (this.#state === 'closing') {
      this.#state = 'closed';
      this.closed();
    }
    if (late !== undefined) throw late;
  }

  stats(): ChannelStats {
    return {
      messagesSent: this.messagesSent,
      bytesSent: this.bytesSent,
      messagesReceived: this.messagesReceived,
      bytesReceived: this.bytesReceived,
      queuedMessages: this.#queue.length - this.#head,
      queuedBytes: this.#queuedBytes,
      sendStalls: this.sendStalls,
    };
  }

  /** For a send about to wait for the window: aborted if close() gives it up. */
  giveUpSignal(): AbortSignal {
    if (this.#giveUp === undefined) {
      this.#giveUp = new AbortController();
      // One listener per waiting send of this channel: as many as the window queues.
      setMaxListeners(0, this.#giveUp.signal);
    }
    return this.#giveUp.signal;
  }

  /** A send's frame was written (or it gave up). */
  sendDone(): void {
    this.pendingSends--;
    if (this.pendingSends === 0 && this.#idle !== undefined) {
      const idle = this.#idle;
      this.#idle = undefined;
      idle();
    }
  }

  /** A message arrived (in order; the connection checked it). */
  deliver(m: InboundMessage): void {
    this.messagesReceived++;
    this.bytesReceived += m.length;
    if (this.#state !== 'open') {
      m.release(); // closed here while it was in flight: give the window back at once
      return;
    }
    if (this.#onMessage !== undefined) {
      this.#hand(m);
      return;
    }
    const w = this.#nextWaiter();
    if (w !== undefined) {
      this.#settle(w);
      w.succeed(w.copy ? copyOut(m) : m);
      return;
    }
    this.#queue.push(m);
    this.#queuedBytes += m.length;
  }

  /** The peer closed its side: pending receives end once the queue is empty. */
  peerClose(): void {
    this.peerClosed = true;
    if (this.#head >= this.#queue.length)
      this.#endWaiters(new MuxClosedError(`channel ${this.id}`));
  }

  /** The connection failed or was destroyed: everything pending rejects with `err`. */
  fail(err: Error): void {
    if (this.#state === 'closed' || this.#state === 'failed') return;
    this.#state = 'failed';
    this.#error = err;
    this.#discardQueue();
    this.#endWaiters(err);
    this.#idle?.();
    this.#idle = undefined;
  }

  /** The connection closed gracefully: queued messages stay receivable. */
  finish(): void {
    if (this.#state === 'failed') return;
    this.peerClose();
    if (this.#state === 'open' || this.#state === 'closing') this.#state = 'closed';
  }

  /**
   * A message to the listener. Its throw must not unwind the transport's receive path (which
   * calls deliver) half way: it is rethrown on its own, as an event listener's would be.
   */
  #hand(m: InboundMessage): void {
    try {
      (this.#onMessage as (m: InboundMessage) => void)(m);
    } catch (err) {
      process.nextTick(rethrow, err);
    }
  }

  /** The listener learns, once, that nothing more will arrive. */
  #end(err: Error): void {
    const onEnd = this.#onEnd;
    if (onEnd === undefined) return;
    this.#onEnd = undefined;
    this.#onMessage = noMessage;
    try {
      onEnd(err);
    } catch (thrown) {
      process.nextTick(rethrow, thrown);
    }
  }

  #take(copy: boolean): InboundMessage {
    const m = this.#queue[this.#head] as InboundMessage;
    this.#queue[this.#head] = undefined as unknown as InboundMessage;
    this.#head++;
    if (this.#head === this.#queue.length) {
      this.#queue.length = 0;
      this.#head = 0;
    } else if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue.splice(0, this.#head);
      this.#head = 0;
    }
    this.#queuedBytes -= m.length;
    if (this.peerClosed && this.#head >= this.#queue.length) {
      queueMicrotask(() => this.#endWaiters(new MuxClosedError(`channel ${this.id}`)));
    }
    return copy ? copyOut(m) : m;
  }

  #discardQueue(): void {
    for (let i = this.#head; i < this.#queue.length; i++) this.#queue[i]?.release();
    this.#queue.length = 0;
    this.#head = 0;
    this.#queuedBytes = 0;
  }

  /** Rejects every pending receive; the channel waits no more, so idle timers go too. */
  #endWaiters(err: Error): void {
    this.#end(err);
    const ws = this.#waiters.slice(this.#wHead, this.#wTail) as ReceiveWaiter[];
    this.#waiters.length = 0;
    this.#wHead = 0;
    this.#wTail = 0;
    for (const w of ws) {
      w.settle();
      w.drop();
      w.fail(err);
    }
    for (const w of this.#idleWaiters) w.drop();
    this.#idleWaiters.length = 0;
  }

  #unwait(w: ReceiveWaiter): void {
    const ws = this.#waiters;
    const i = ws.indexOf(w, this.#wHead);
    if (i >= 0 && i < this.#wTail) {
      ws.copyWithin(i, i + 1, this.#wTail);
      ws[--this.#wTail] = undefined;
      if (this.#wHead === this.#wTail) this.#wHead = this.#wTail = 0;
    }
    this.#settle(w);
  }

  #nextWaiter(): ReceiveWaiter | undefined {
    if (this.#wHead === this.#wTail) return undefined;
    const w = this.#waiters[this.#wHead];
    this.#waiters[this.#wHead++] = undefined;
    if (this.#wHead === this.#wTail) this.#wHead = this.#wTail = 0;
    return w;
  }

  /** Disarms a waiter and keeps it for the next wait. */
  #settle(w: ReceiveWaiter): void {
    w.settle();
    if (this.#idleWaiters.length < WAITER_POOL_MAX) this.#idleWaiters.push(w);
    else w.drop();
  }
}

/** After the end: what still arrives (a closed channel's in-flight messages) is released. */
function noMessage(m: InboundMessage): void {
  m.release();
}

function rethrow(err: unknown): never {
  throw err;
}

/** Copies a message out and releases the transport's memory at once. */
function copyOut(m: InboundMessage): InboundMessage {
  const bytes = m.copy();
  const out = new InboundMessage(m.channel, m.seq, bytes, () => {});
  m.release();
  return out;
}

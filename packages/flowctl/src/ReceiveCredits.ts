import { type Clock, systemClock } from './Clock.js';
import { FlowctlClosedError, FlowctlError } from './errors.js';
import {
  checkClock,
  checkInt,
  checkNumber,
  describeValue,
  ownOptions,
} from './internal/validate.js';

export interface ReceiveCreditsOptions {
  /** Receive buffers posted for this peer; the peer starts with this many credits. */
  initialCredits: number;
  /**
   * Credits the peer's sender keeps back for credit updates (default 1, at least 1). Recorded here
   * so the threshold can be checked against it and the handshake can carry it.
   */
  reservedCredits?: number;
  /**
   * Return credits by an explicit update once this many are unreturned. Must lie in
   * [2, initialCredits - reservedCredits]. Default: half of that range's top, at least 2.
   */
  returnThreshold?: number;
  /**
   * Largest credit count one message header can carry. Default 65 535; at least
   * `returnThreshold`, so one update returns everything that made it due.
   */
  maxGrantPerMessage?: number;
  /**
   * Credits of buffers the application released (`release`) go back within this long even
   * when fewer than `returnThreshold` are owed and no message goes to the peer: `updateNeeded`
   * turns true and `onUpdateNeeded` is called. Without it a stalled sender and a receiver
   * that holds its other buffers until more data arrives (reassembly) wait for each other
   * forever. 0..60 000 ms, default 1.
   */
  flushDelayMs?: number;
  /** Time source of the flush delay (default: the system clock). */
  clock?: Clock;
  /** Called once each time `updateNeeded` turns true (threshold reached, or the flush delay passed). */
  onUpdateNeeded?: () => void;
}

/** The credit values of one direction, as a handshake carries them. */
export interface CreditParams {
  readonly initialCredits: number;
  readonly reservedCredits: number;
  readonly returnThreshold: number;
}

export interface ReceiveCreditsStats {
  readonly state: ReceiveCreditsState;
  readonly posted: number;
  readonly inUse: number;
  readonly unreturned: number;
  readonly received: number;
  /** Messages that arrived with no posted buffer: the RNR equivalent. Zero when peers obey. */
  readonly overruns: number;
  /**
   * Messages the peer sent without holding a credit that landed in a reposted buffer whose
   * credit was still owed: that credit is then forfeited, so the peer is never granted more
   * credits than there are buffers. Zero when peers obey.
   */
  readonly creditViolations: number;
  readonly maxInUse: number;
  /** The peer's lease: buffers it may fill (`initialCredits`, grown by `grow`, shrunk by `peerReturned`). */
  readonly capacity: number;
  /** Credits the peer holds or that are on their way to it (`peerCredits`). */
  readonly peerCredits: number;
  /** Credits added by `grow` and given back by the peer (`peerReturned`), in total. */
  readonly grown: number;
  readonly returnedByPeer: number;
  readonly piggybackReturns: number;
  readonly piggybackCredits: number;
  readonly explicitUpdates: number;
  readonly explicitCredits: number;
  /** Times the flush delay made an update due (credits owed below the threshold). */
  readonly delayedFlushes: number;
}

export type ReceiveCreditsState = 'open' | 'closed';

/**
 * Receiver-side credit bookkeeping for one peer. A buffer is posted, then filled by an
 * arriving message (`onReceive`), then released and reposted by the application
 * (`release`): only then is its credit owed to the peer. Owed credits go back piggybacked
 * on any message to the peer (`takePiggyback`), or in an explicit update
 * (`updateNeeded` / `takeUpdate`) once `returnThreshold` of them are owed.
 *
 * Why the threshold is at least 2: a credit update itself lands in a receive buffer whose
 * credit is owed back. With a threshold of 1 on both sides each update would trigger the
 * next one forever. With 2, an update can trigger at most one in return.
 *
 * Why two release calls: credits of data buffers (`release`) also go back after
 * `flushDelayMs` however few are owed, so a stalled sender always gets them; credits of
 * credit-update buffers (`releaseUpdate`) wait for the threshold or the next message. A
 * delay on those too would answer every update with another one, forever, on idle peers.
 */
export class ReceiveCredits {
  private total: number;
  private readonly initial: number;
  private readonly reserved: number;
  /** The threshold asked for at `initialCredits`; scaled with the lease when it changes. */
  private readonly baseThreshold: number;
  private threshold: number;
  private readonly maxGrant: number;
  private readonly flushDelay: number;
  private readonly clock: Clock;
  private readonly onUpdateNeeded: (() => void) | undefined;
  private readonly onFlushTimer = (): void => this.flushTimerFired();
  private currentState: ReceiveCreditsState = 'open';
  private used = 0;
  private owed = 0;
  /** The part of `owed` that comes from data buffers (`release`): what the flush delay returns. */
  private owedData = 0;
  /** Update credits are owed while the peer looked stalled: the flush delay returns them too. */
  private echoArmed = false;
  /** The transport owes the peer something else with its next message (`oweReturn`). */
  private owedOther = false;
  private flushDue = false;
  private flushTimer: unknown;
  private delayedFlushes = 0;
  private received = 0;
  private grownTotal = 0;
  private peerReturnedTotal = 0;
  private overruns = 0;
  private violations = 0;
  private maxUsed = 0;
  private piggybackReturns = 0;
  private piggybackCredits = 0;
  private explicitUpdates = 0;
  private explicitCredits = 0;

  constructor(opts: ReceiveCreditsOptions) {
    const options = ownOptions('ReceiveCredits options', opts) as Partial<ReceiveCreditsOptions>;
    this.reserved = checkInt('reservedCredits', options.reservedCredits ?? 1, 1);
    this.total = checkInt('initialCredits', options.initialCredits, this.reserved + 2);
    this.initial = this.total;
    const top = this.total - this.reserved;
    this.maxGrant = checkInt('maxGrantPerMessage', options.maxGrantPerMessage ?? 0xffff, 2);
    this.threshold = checkInt(
      'returnThreshold',
      options.returnThreshold ?? Math.max(2, Math.min(this.maxGrant, Math.floor(top / 2))),
      2,
      top,
    );
    this.baseThreshold = this.threshold;
    if (this.maxGrant < this.threshold) {
      throw new FlowctlError(
        'ERR_FLOWCTL_INVALID_ARG',
        `maxGrantPerMessage (${this.maxGrant}) must be at least returnThreshold (${this.threshold}): ` +
          'an update must be able to return every credit that made it due',
      );
    }
    this.flushDelay = checkNumber('flushDelayMs', options.flushDelayMs ?? 1, 0);
    if (this.flushDelay > 60_000) {
      throw new FlowctlError(
        'ERR_FLOWCTL_INVALID_ARG',
        `flushDelayMs must be at most 60000, got ${this.flushDelay}`,
      );
    }
    this.clock = checkClock(options.clock) ?? systemClock;
    if (options.onUpdateNeeded !== undefined && typeof options.onUpdateNeeded !== 'function') {
      throw new FlowctlError(
        'ERR_FLOWCTL_INVALID_ARG',
        `onUpdateNeeded must be a function, got ${describeValue(options.onUpdateNeeded)}`,
      );
    }
    this.onUpdateNeeded = options.onUpdateNeeded;
  }

  get state(): ReceiveCreditsState {
    return this.currentState;
  }

  /** Receive buffers dedicated to this peer: its lease. */
  get capacity(): number {
    return this.total;
  }

  /**
   * Credits the peer holds, has in flight to us, or has on their way to it: the lease minus
   * the buffers in use and the credits owed. Low while the peer is busy (it waits for
   * returns): the signal to `grow` its lease.
   */
  get peerCredits(): number {
    return (
      this.initial +
      this.piggybackCredits +
      this.explicitCredits -
      this.peerReturnedTotal -
      this.received
    );
  }

  /** Buffers posted and empty. */
  get posted(): number {
    return this.total - this.used;
  }

  /** Buffers holding a message the application has not released. */
  get inUse(): number {
    return this.used;
  }

  /** Credits owed to the peer: buffers reposted since the last return. */
  get unreturned(): number {
    return this.owed;
  }

  get returnThreshold(): number {
    return this.threshold;
  }

  /**
   * True when an explicit credit update should be sent (no reverse traffic to piggyback on):
   * `returnThreshold` credits are owed, or data credits have been owed for `flushDelayMs`.
   */
  get updateNeeded(): boolean {
    return this.owed >= this.threshold || this.flushDue;
  }

  /**
   * A message from the peer landed. True when it took a posted buffer; false when none
   * was posted (an overrun: on a NIC, receiver-not-ready), counted in `stats().overruns`.
   */
  onReceive(): boolean {
    this.checkOpen('onReceive');
    if (this.used >= this.total) {
      this.overruns++;
      return false;
    }
    // The peer holds at most initial + returned - received credits; at zero it sent without
    // one, into a buffer whose credit is owed: that credit is used up, not returned later.
    if (this.peerCredits <= 0) {
      this.violations++;
      if (this.owed > 0) {
        this.owed--;
        // Nothing left owed: no update (and no flush) is due for a credit that no longer exists.
        if (this.owed === 0) this.echoArmed = false;
        this.dataReturned(Math.max(0, this.owedData - this.owed));
      }
    }
    this.used++;
    this.received++;
    if (this.used > this.maxUsed) this.maxUsed = this.used;
    return true;
  }

  /**
   * The application released `count` received data buffers and they were reposted. Their
   * credits go back piggybacked, at the threshold, or after `flushDelayMs` at the latest.
   */
  release(count = 1): void {
    this.checkOpen('release');
    checkInt('count', count, 1, this.used);
    const wasNeeded = this.updateNeeded;
    this.used -= count;
    this.oweData(count, wasNeeded);
  }

  /**
   * The buffer of a credit-only update from the peer was reposted (by the transport, at once).
   * Its credit goes back piggybacked or at the threshold, never by the flush delay alone.
   */
  releaseUpdate(): void {
    this.checkOpen('releaseUpdate');
    if (this.used === 0) {
      throw new FlowctlError(
        'ERR_FLOWCTL_INVALID_ARG',
        'releaseUpdate: no received buffer is in use',
      );
    }
    const wasNeeded = this.updateNeeded;
    this.used--;
    this.owed++;
    if (!this.echoArmed && this.peerStalled()) {
      this.echoArmed = true;
      this.startFlushTimer();
    }
    if (!wasNeeded && this.updateNeeded) this.onUpdateNeeded?.();
  }

  /**
   * The transport owes the peer a return that is not a buffer credit (send-window space of a
   * message the application released after its buffer's credit went back, as a rendezvous
   * message's). The flush delay covers it as it covers data credits: `updateNeeded` turns
   * true within `flushDelayMs` unless a message to the peer carries it first. Any
   * `takePiggyback` or `takeUpdate` counts as carrying it, so the transport stamps what it
   * owes into the same message. One delay, one timer, for everything a peer waits for.
   */
  oweReturn(): void {
    this.checkOpen('oweReturn');
    if (this.owedOther) return;
    this.owedOther = true;
    this.startFlushTimer();
  }

  /**
   * Grows the peer's lease by `count` buffers, which the transport has posted already: they
   * are owed to the peer at once (piggybacked, by the threshold or the flush delay, as data
   * credits). The return threshold scales with the lease.
   */
  grow(count: number): void {
    this.checkOpen('grow');
    checkInt('count', count, 1, this.maxGrant);
    const wasNeeded = this.updateNeeded;
    this.total += count;
    this.grownTotal += count;
    this.scaleThreshold();
    this.oweData(count, wasNeeded);
  }

  /** `count` data credits owed to the peer: piggybacked, at the threshold, or by the flush delay. */
  private oweData(count: number, wasNeeded: boolean): void {
    this.owed += count;
    this.owedData += count;
    this.startFlushTimer();
    if (!wasNeeded && this.updateNeeded) this.onUpdateNeeded?.();
  }

  /** The one flush timer, unless it runs or a flush is already due. */
  private startFlushTimer(): void {
    if (this.flushTimer === undefined && !this.flushDue) {
      this.flushTimer = this.clock.setTimer(this.onFlushTimer, this.flushDelay);
    }
  }

  /**
   * The peer gave back `count` credits it held (its lease shrinks; the transport may unpost
   * as many buffers). Throws ERR_FLOWCTL_PROTOCOL when the peer cannot hold that many
   * (`peerCredits`) or would shrink below `initialCredits`.
   */
  peerReturned(count: number): void {
    this.checkOpen('peerReturned');
    checkInt('count', count, 1);
    if (count > this.peerCredits || this.total - count < this.initial) {
      throw new FlowctlError(
        'ERR_FLOWCTL_PROTOCOL',
        `ReceiveCredits: peer gave back ${count} credits; it holds at most ${this.peerCredits}` +
          ` and its lease is ${this.total - this.initial} above the initial ${this.initial}`,
      );
    }
    this.total -= count;
    this.peerReturnedTotal += count;
    this.scaleThreshold();
  }

  /** Credits to carry in the header of any message to the peer (0 when none are owed). */
  takePiggyback(): number {
    this.checkOpen('takePiggyback');
    const n = this.take();
    if (n > 0) {
      this.piggybackReturns++;
      this.piggybackCredits += n;
    }
    return n;
  }

  /** Credits to carry in an explicit credit update (send it only when this is > 0). */
  takeUpdate(): number {
    this.checkOpen('takeUpdate');
    const n = this.take();
    if (n > 0) {
      this.explicitUpdates++;
      this.explicitCredits += n;
    }
    return n;
  }

  /** The values the handshake carries to the peer's `SendCredits`. */
  params(): CreditParams {
    return {
      initialCredits: this.initial,
      reservedCredits: this.reserved,
      returnThreshold: this.baseThreshold,
    };
  }

  /** Idempotent; later calls throw ERR_FLOWCTL_CLOSED. */
  close(): void {
    this.currentState = 'closed';
    this.stopFlushTimer();
    this.flushDue = false;
    this.owedOther = false;
  }

  stats(): ReceiveCreditsStats {
    return {
      state: this.currentState,
      posted: this.total - this.used,
      inUse: this.used,
      unreturned: this.owed,
      received: this.received,
      overruns: this.overruns,
      creditViolations: this.violations,
      maxInUse: this.maxUsed,
      capacity: this.total,
      peerCredits: this.peerCredits,
      grown: this.grownTotal,
      returnedByPeer: this.peerReturnedTotal,
      piggybackReturns: this.piggybackReturns,
      piggybackCredits: this.piggybackCredits,
      explicitUpdates: this.explicitUpdates,
      explicitCredits: this.explicitCredits,
      delayedFlushes: this.delayedFlushes,
    };
  }

  /** Takes up to `maxGrant` owed credits, data credits first (they are what the timer waits for). */
  private take(): number {
    if (this.owedOther) {
      this.owedOther = false;
      this.dataReturned(0);
    }
    const n = Math.min(this.owed, this.maxGrant);
    if (n === 0) return 0;
    this.owed -= n;
    if (this.owed === 0) this.echoArmed = false;
    this.dataReturned(Math.min(n, this.owedData));
    return n;
  }

  /** The threshold keeps its ratio to the lease: a grown lease is not returned in crumbs. */
  private scaleThreshold(): void {
    const top = this.total - this.reserved;
    const scaled = Math.round((this.baseThreshold * this.total) / this.initial);
    this.threshold = Math.max(2, Math.min(this.maxGrant, top, scaled));
  }

  /** The peer holds no credit for data, as far as this side can tell (returns in flight counted). */
  private peerStalled(): boolean {
    return this.peerCredits <= this.reserved;
  }

  /** `n` data credits left the owed count: the flush delay is over once none are left. */
  private dataReturned(n: number): void {
    this.owedData -= n;
    if (this.owedData === 0 && !this.echoArmed && !this.owedOther) {
      this.stopFlushTimer();
      this.flushDue = false;
    }
  }

  private flushTimerFired(): void {
    this.flushTimer = undefined;
    if (this.currentState !== 'open' || (this.owedData === 0 && !this.echoArmed && !this.owedOther))
      return;
    const wasNeeded = this.updateNeeded;
    this.flushDue = true;
    this.delayedFlushes++;
    if (!wasNeeded) this.onUpdateNeeded?.();
  }

  private stopFlushTimer(): void {
    if (this.flushTimer === undefined) return;
    this.clock.clearTimer(this.flushTimer);
    this.flushTimer = undefined;
  }

  private checkOpen(what: string): void {
    if (this.currentState !== 'open') throw new FlowctlClosedError(`ReceiveCredits.${what}`);
  }
}

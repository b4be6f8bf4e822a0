import { FlowctlClosedError, FlowctlError } from './errors.js';
import { checkInt, describeValue, ownOptions } from './internal/validate.js';

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
  /** Largest credit count one message header can carry. Default 65 535. */
  maxGrantPerMessage?: number;
  /** Called once each time the unreturned count reaches the threshold. */
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
  readonly piggybackReturns: number;
  readonly piggybackCredits: number;
  readonly explicitUpdates: number;
  readonly explicitCredits: number;
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
 */
export class ReceiveCredits {
  private readonly total: number;
  private readonly reserved: number;
  private readonly threshold: number;
  private readonly maxGrant: number;
  private readonly onUpdateNeeded: (() => void) | undefined;
  private currentState: ReceiveCreditsState = 'open';
  private used = 0;
  private owed = 0;
  private received = 0;
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
    const top = this.total - this.reserved;
    this.threshold = checkInt(
      'returnThreshold',
      options.returnThreshold ?? Math.max(2, Math.floor(top / 2)),
      2,
      top,
    );
    this.maxGrant = checkInt('maxGrantPerMessage', options.maxGrantPerMessage ?? 0xffff, 1);
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

  /** Receive buffers dedicated to this peer. */
  get capacity(): number {
    return this.total;
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

  /** True when an explicit credit update should be sent (no reverse traffic to piggyback on). */
  get updateNeeded(): boolean {
    return this.owed >= this.threshold;
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
    if (this.total + this.piggybackCredits + this.explicitCredits - this.received <= 0) {
      this.violations++;
      if (this.owed > 0) this.owed--;
    }
    this.used++;
    this.received++;
    if (this.used > this.maxUsed) this.maxUsed = this.used;
    return true;
  }

  /** The application released `count` received buffers and they were reposted. */
  release(count = 1): void {
    this.checkOpen('release');
    checkInt('count', count, 1, this.used);
    const before = this.owed;
    this.used -= count;
    this.owed += count;
    if (before < this.threshold && this.owed >= this.threshold) this.onUpdateNeeded?.();
  }

  /** Credits to carry in the header of any message to the peer (0 when none are owed). */
  takePiggyback(): number {
    this.checkOpen('takePiggyback');
    const n = Math.min(this.owed, this.maxGrant);
    if (n > 0) {
      this.owed -= n;
      this.piggybackReturns++;
      this.piggybackCredits += n;
    }
    return n;
  }

  /** Credits to carry in an explicit credit update (send it only when this is > 0). */
  takeUpdate(): number {
    this.checkOpen('takeUpdate');
    const n = Math.min(this.owed, this.maxGrant);
    if (n > 0) {
      this.owed -= n;
      this.explicitUpdates++;
      this.explicitCredits += n;
    }
    return n;
  }

  /** The values the handshake carries to the peer's `SendCredits`. */
  params(): CreditParams {
    return {
      initialCredits: this.total,
      reservedCredits: this.reserved,
      returnThreshold: this.threshold,
    };
  }

  /** Idempotent; later calls throw ERR_FLOWCTL_CLOSED. */
  close(): void {
    this.currentState = 'closed';
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
      piggybackReturns: this.piggybackReturns,
      piggybackCredits: this.piggybackCredits,
      explicitUpdates: this.explicitUpdates,
      explicitCredits: this.explicitCredits,
    };
  }

  private checkOpen(what: string): void {
    if (this.currentState !== 'open') throw new FlowctlClosedError(`ReceiveCredits.${what}`);
  }
}

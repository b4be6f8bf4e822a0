import { RpcError } from './errors.js';
import { checkInt, checkKnownKeys, ownOptions } from './internal/validate.js';

export interface CallSequencerOptions {
  /** Sequences handed out and not yet settled, at most. Keep it <= the server's `maxEntriesPerSession`. Default 1024. */
  maxInFlight?: number;
  /** The first sequence (a resumed session continues where it was). Default 0. */
  firstSeq?: number;
}

/**
 * The client half of de-duplication: hands out the session sequence of each
 * non-idempotent call and computes the `ackBelow` every request piggybacks (the lowest
 * sequence not yet settled), so the server retires entries as soon as it may. A call is
 * settled when its reply arrived or the client gave it up for good (it is then never sent
 * again; a late duplicate is refused by the server as expired). Bounded: at most
 * `maxInFlight` unsettled sequences, so the server's per-session bound is never hit.
 */
export class CallSequencer {
  private readonly maxInFlight: number;
  private nextSeq: number;
  /** Lowest unsettled sequence; everything below it is settled. */
  private low: number;
  /** settled[i] is sequence low + i (a ring of maxInFlight flags). */
  private readonly settledRing: Uint8Array;
  private unsettled = 0;

  constructor(options?: CallSequencerOptions) {
    const o = ownOptions('CallSequencer options', options, true);
    checkKnownKeys('CallSequencer', o, ['maxInFlight', 'firstSeq']);
    this.maxInFlight =
      o.maxInFlight === undefined ? 1024 : checkInt('maxInFlight', o.maxInFlight, 1, 1 << 24);
    this.nextSeq = o.firstSeq === undefined ? 0 : checkInt('firstSeq', o.firstSeq, 0);
    this.low = this.nextSeq;
    this.settledRing = new Uint8Array(this.maxInFlight);
  }

  /** False while `maxInFlight` sequences are unsettled (the oldest holds the window). */
  get canSend(): boolean {
    return this.nextSeq - this.low < this.maxInFlight;
  }

  /** Sequences handed out and not settled. */
  get inFlight(): number {
    return this.unsettled;
  }

  /** What every request carries: each sequence below it is settled. */
  get ackBelow(): number {
    return this.low;
  }

  /** The sequence for a new call. ERR_RPC_INVALID_STATE when `canSend` is false. */
  next(): number {
    if (!this.canSend) {
      throw new RpcError(
        'ERR_RPC_INVALID_STATE',
        `${this.maxInFlight} calls unsettled since sequence ${this.low}: wait for replies`,
      );
    }
    if (this.nextSeq >= Number.MAX_SAFE_INTEGER) {
      throw new RpcError('ERR_RPC_INVALID_STATE', 'session sequences exhausted');
    }
    this.unsettled++;
    return this.nextSeq++;
  }

  /**
   * Marks a call's sequence settled (reply received or given up for good). Settling a
   * sequence twice, or one never handed out, is ignored and returns false (a duplicate
   * reply from the peer is no reason to fail).
   */
  settle(seq: number): boolean {
    if (!Number.isInteger(seq) || seq < this.low || seq >= this.nextSeq) return false;
    const slot = seq % this.maxInFlight;
    if (this.settledRing[slot] === 1) return false;
    this.settledRing[slot] = 1;
    this.unsettled--;
    while (this.low < this.nextSeq && this.settledRing[this.low % this.maxInFlight] === 1) {
      this.settledRing[this.low % this.maxInFlight] = 0;
      this.low++;
    }
    return true;
  }

  /** True for a sequence handed out and not yet settled (to replay after a reconnection). */
  isPending(seq: number): boolean {
    return (
      Number.isInteger(seq) &&
      seq >= this.low &&
      seq < this.nextSeq &&
      this.settledRing[seq % this.maxInFlight] === 0
    );
  }
}

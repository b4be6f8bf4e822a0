import { staleEpochChannel } from './diagnostics.js';
import { RpcError } from './errors.js';
import { checkInt } from './internal/validate.js';
import { MAX_EPOCH } from './SessionAuthority.js';

/** Published on `rdmajs:rpc:session:stale-epoch` for each dropped completion or reply. */
export interface StaleEpochDrop {
  readonly sessionId: string | undefined;
  /** The epoch the dropped item was tagged with. */
  readonly epoch: number;
  /** The epoch accepted at the time (0 before the first). */
  readonly current: number;
  /** 'stale': an older epoch (or the current one while it is closed); 'future': a newer one, which no honest peer sends. */
  readonly kind: 'stale' | 'future';
}

export interface EpochFilterStats {
  accepted: number;
  stale: number;
  future: number;
}

/**
 * Decides whether a completion or reply tagged with an epoch may be delivered: only the
 * current epoch's, and only while it is open. Everything else is dropped and counted, so
 * nothing from a dead connection reaches calls of the new one. Epochs only move forward.
 */
export class EpochFilter {
  private epoch = 0;
  private open = false;
  private readonly counts: EpochFilterStats = { accepted: 0, stale: 0, future: 0 };
  /** Labels what this filter publishes (a client learns its session id on first connect). */
  sessionId: string | undefined;

  constructor(sessionId?: string) {
    this.sessionId = sessionId;
  }

  /** The epoch last opened (0 before the first). */
  get current(): number {
    return this.epoch;
  }

  /** True while the current epoch accepts deliveries. */
  get isOpen(): boolean {
    return this.open;
  }

  /** Opens `epoch`, which must be above every earlier one. */
  advance(epoch: number): void {
    checkInt('epoch', epoch, 1, MAX_EPOCH);
    if (epoch <= this.epoch) {
      throw new RpcError(
        'ERR_RPC_INVALID_STATE',
        `epoch ${epoch} is not above the current epoch ${this.epoch}`,
      );
    }
    this.epoch = epoch;
    this.open = true;
  }

  /** Stops accepting the current epoch (its connection is gone); the next `advance` reopens. */
  close(): void {
    this.open = false;
  }

  /**
   * True when an item tagged `epoch` may be delivered. False (counted and published) for
   * an older epoch, the current one while closed, a newer one, or a value that is no epoch.
   */
  accept(epoch: number): boolean {
    if (this.open && epoch === this.epoch) {
      this.counts.accepted++;
      return true;
    }
    const future = Number.isInteger(epoch) && epoch > this.epoch;
    const kind = future ? 'future' : 'stale';
    this.counts[kind]++;
    if (staleEpochChannel.hasSubscribers) {
      const drop: StaleEpochDrop = { sessionId: this.sessionId, epoch, current: this.epoch, kind };
      staleEpochChannel.publish(drop);
    }
    return false;
  }

  stats(): EpochFilterStats {
    return { ...this.counts };
  }
}

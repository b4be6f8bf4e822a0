import {
  type BudgetClient,
  type BudgetLink,
  kAdmit,
  kDetach,
  kDispatchSelected,
  kEnqueue,
  kFits,
  kGive,
  kMaybeDrain,
  kPump,
  kSelectedBytes,
  kTake,
  kWantDrain,
} from './internal/budgetLink.js';
import { Ring } from './internal/Ring.js';
import { checkInt, ownOptions } from './internal/validate.js';

export interface SharedBudgetOptions {
  /** Outstanding bytes allowed across every window that shares this budget. */
  maxBytes: number;
  /** Outstanding messages allowed across every window that shares this budget. */
  maxMessages: number;
  /** Deficit-round-robin quantum between windows, in bytes. Default 16 KiB. */
  quantumBytes?: number;
}

export interface SharedBudgetStats {
  readonly bytesInFlight: number;
  readonly messagesInFlight: number;
  readonly maxBytesInFlight: number;
  readonly maxMessagesInFlight: number;
  /** Windows currently waiting for budget space. */
  readonly waitingWindows: number;
  /** Times a window had to queue for budget space. */
  readonly budgetStalls: number;
}

interface Slot {
  readonly client: BudgetClient;
  deficit: number;
  turn: boolean;
  queued: boolean;
}

/**
 * A byte and message budget shared by many `SendWindow`s (every connection of a process or
 * of a device), so an incast burst across connections is bounded as a whole, not only per
 * connection. Windows blocked on the budget are served by deficit round-robin by bytes:
 * a connection with large messages cannot starve one with small messages, nor the reverse.
 * Pass it as `new SendWindow({ budget })`; it has no public mutators of its own.
 */
export class SharedBudget implements BudgetLink {
  readonly maxBytes: number;
  readonly maxMessages: number;
  private readonly quantum: number;
  private bytes = 0;
  private messages = 0;
  private maxBytesSeen = 0;
  private maxMessagesSeen = 0;
  private stalls = 0;
  private pumping = false;
  private readonly ring = new Ring<Slot>();
  private readonly slots = new Map<BudgetClient, Slot>();
  private readonly drainWanted = new Set<BudgetClient>();

  constructor(opts: SharedBudgetOptions) {
    const options = ownOptions('SharedBudget options', opts) as Partial<SharedBudgetOptions>;
    this.maxBytes = checkInt('maxBytes', options.maxBytes, 1);
    this.maxMessages = checkInt('maxMessages', options.maxMessages, 1);
    this.quantum = checkInt('quantumBytes', options.quantumBytes ?? 16 * 1024, 1);
  }

  get bytesInFlight(): number {
    return this.bytes;
  }

  get messagesInFlight(): number {
    return this.messages;
  }

  stats(): SharedBudgetStats {
    return {
      bytesInFlight: this.bytes,
      messagesInFlight: this.messages,
      maxBytesInFlight: this.maxBytesSeen,
      maxMessagesInFlight: this.maxMessagesSeen,
      waitingWindows: this.ring.size,
      budgetStalls: this.stalls,
    };
  }

  [kFits](bytes: number): boolean {
    return this.messages < this.maxMessages && bytes <= this.maxBytes - this.bytes;
  }

  [kAdmit](bytes: number): boolean {
    return this.ring.size === 0 && this[kFits](bytes);
  }

  [kTake](bytes: number): void {
    this.bytes += bytes;
    this.messages++;
    if (this.bytes > this.maxBytesSeen) this.maxBytesSeen = this.bytes;
    if (this.messages > this.maxMessagesSeen) this.maxMessagesSeen = this.messages;
  }

  [kGive](bytes: number, messages: number): void {
    this.bytes -= bytes;
    this.messages -= messages;
    this.pump();
  }

  [kEnqueue](client: BudgetClient): void {
    let slot = this.slots.get(client);
    if (slot === undefined) {
      slot = { client, deficit: 0, turn: false, queued: false };
      this.slots.set(client, slot);
    }
    if (!slot.queued) {
      slot.queued = true;
      this.stalls++;
      this.ring.push(slot);
    }
    // Entries whose waiter left are dropped lazily; make sure the head gets served.
    this.pump();
  }

  [kWantDrain](client: BudgetClient): void {
    this.drainWanted.add(client);
  }

  [kDetach](client: BudgetClient): void {
    this.drainWanted.delete(client);
    const slot = this.slots.get(client);
    if (slot !== undefined && !slot.queued) this.slots.delete(client);
    // A queued slot is dropped by the next pump (its window has nothing selected any more).
    this.pump();
  }

  [kPump](): void {
    this.pump();
  }

  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      let idle = 0;
      for (;;) {
        const slot = this.ring.peek();
        if (slot === undefined) break;
        const sel = slot.client[kSelectedBytes]();
        if (sel < 0) {
          this.ring.shift();
          slot.queued = false;
          slot.deficit = 0;
          slot.turn = false;
          idle = 0;
          continue;
        }
        // Nothing can go until something completes: hand out no rounds meanwhile.
        if (this.messages >= this.maxMessages || this.bytes >= this.maxBytes) break;
        if (!slot.turn) {
          slot.deficit += this.quantum;
          slot.turn = true;
        }
        if (sel > slot.deficit) {
          slot.turn = false;
          this.ring.rotate();
          idle++;
          if (idle >= this.ring.size) {
            this.skipAhead();
            idle = 0;
          }
          continue;
        }
        if (!this[kFits](sel)) break;
        slot.client[kDispatchSelected]();
        slot.deficit -= sel;
        idle = 0;
      }
    } finally {
      this.pumping = false;
    }
    if (this.drainWanted.size > 0) {
      for (const client of this.drainWanted) {
        if (client[kMaybeDrain]()) this.drainWanted.delete(client);
      }
    }
  }

  /** Every queued window had a turn and none could send: grant the rounds nobody would use. */
  private skipAhead(): void {
    let rounds = Number.POSITIVE_INFINITY;
    for (let i = 0; i < this.ring.size; i++) {
      const slot = this.ring.at(i) as Slot;
      const sel = slot.client[kSelectedBytes]();
      if (sel < 0) return;
      const need = Math.ceil((sel - slot.deficit) / this.quantum);
      if (need < rounds) rounds = need;
    }
    if (!Number.isFinite(rounds) || rounds <= 1) return;
    const extra = (rounds - 1) * this.quantum;
    for (let i = 0; i < this.ring.size; i++) (this.ring.at(i) as Slot).deficit += extra;
  }
}

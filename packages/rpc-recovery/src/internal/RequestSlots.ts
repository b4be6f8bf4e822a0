import { SendWindow, type SharedBudget } from '@rdmajs/flowctl';

/** What a wait for a slot came to. */
export type SlotWait = 'taken' | 'expired' | 'closed';

/**
 * The requests one connection may have executing at once, also counted against the server's
 * shared budget. A flowctl window of one "byte" per request: the same bounded, fair (deficit
 * round-robin between connections, first come first served within one) admission the
 * transports use for sends.
 */
export class RequestSlots {
  readonly #window: SendWindow;

  constructor(max: number, budget: SharedBudget) {
    this.#window = new SendWindow({ maxBytes: max, maxMessages: max, budget, quantumBytes: 1 });
  }

  /** Requests holding a slot now. */
  get running(): number {
    return this.#window.messagesInFlight;
  }

  /** Takes a slot now if one is free (no waiter ahead). */
  tryTake(): boolean {
    return this.#window.tryAcquire(1);
  }

  /**
   * Waits once for a slot, keeping its place in line, for at most `timeoutMs` (the waiting
   * call's own deadline budget: past it the caller has given up, so starting it would only
   * waste the slot). 'expired' then, 'closed' when the slots were closed meanwhile.
   */
  async take(timeoutMs: number): Promise<SlotWait> {
    try {
      await this.#window.acquire(1, { timeoutMs });
      return 'taken';
    } catch (err) {
      return (err as { code?: string }).code === 'ERR_FLOWCTL_DEADLINE' ? 'expired' : 'closed';
    }
  }

  /** A request settled (its reply went out or failed). Allowed after `close()`. */
  give(): void {
    this.#window.release(1);
  }

  /** Rejects a pending `take` (it returns 'closed'); slots still held may be given back. */
  close(): void {
    this.#window.close();
  }
}

import { SendWindow, type SharedBudget } from '@rdmajs/flowctl';

/** How long one wait for a slot lasts before it is simply taken up again (the loop's bound). */
const SLOT_WAIT_MS = 60_000;

/**
 * The requests one connection may have executing at once, also counted against the server's
 * shared budget. A flowctl window of one "byte" per request: the same bounded, fair (deficit
 * round-robin between connections) admission the transports use for sends.
 */
export class RequestSlots {
  readonly #window: SendWindow;

  constructor(max: number, budget: SharedBudget) {
    this.#window = new SendWindow({
      maxBytes: max,
      maxMessages: max,
      budget,
      quantumBytes: 1,
      defaultTimeoutMs: SLOT_WAIT_MS,
    });
  }

  /** Requests holding a slot now. */
  get running(): number {
    return this.#window.messagesInFlight;
  }

  /** Takes a slot now if one is free (no waiter ahead). */
  tryTake(): boolean {
    return this.#window.tryAcquire(1);
  }

  /** Waits for a slot: true once taken, false when the slots were closed meanwhile. */
  async take(): Promise<boolean> {
    for (;;) {
      try {
        await this.#window.acquire(1);
        return true;
      } catch (err) {
        // A wait past its deadline only means every slot is still busy: wait again. Closed
        // (the connection went away) or anything else ends the wait.
        if ((err as { code?: string }).code !== 'ERR_FLOWCTL_DEADLINE') return false;
      }
    }
  }

  /** A request settled (its reply went out or failed). Allowed after `close()`. */
  give(): void {
    this.#window.release(1);
  }

  /** Rejects a pending `take` (it returns false); slots still held may be given back. */
  close(): void {
    this.#window.close();
  }
}

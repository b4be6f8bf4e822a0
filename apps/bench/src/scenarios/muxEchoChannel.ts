// The bench side of a mux echo channel: it reads with `Channel.listen` (a handler per message,
// no receive promise or deadline timer per message), so what a row measures is the transport,
// not the reader; closed-loop rows keep one round trip in flight, open-loop rows many.
import type { Channel, InboundMessage, OutboundMessage } from '@rdmajs/mux';

const LONG = { timeoutMs: 180_000 };

/** A channel whose every message is the echo of one sent on it, in order. */
export class EchoChannel {
  /** Callers waiting for their echo, oldest first (a channel delivers in order). */
  readonly #waiting: { resolve: () => void; reject: (err: Error) => void }[] = [];
  #head = 0;
  #ended: Error | undefined;

  constructor(readonly channel: Channel) {
    channel.listen(
      (m) => this.#arrived(m),
      (err) => this.#end(err),
    );
  }

  /** Sends `payload` and resolves when its echo arrived (rejects if the channel ends first). */
  roundTrip(payload: OutboundMessage): Promise<void> {
    if (this.#ended !== undefined) return Promise.reject(this.#ended);
    const echoed = new Promise<void>((resolve, reject) => {
      this.#waiting.push({ resolve, reject });
    });
    this.channel.send(payload, LONG).catch((err: Error) => this.#end(err));
    return echoed;
  }

  /** `n` round trips one after the other; `record` gets each one's time in microseconds. */
  async roundTrips(
    payload: OutboundMessage,
    n: number,
    record?: (us: number) => void,
  ): Promise<void> {
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await this.roundTrip(payload);
      record?.((performance.now() - t0) * 1000);
    }
  }

  close(): Promise<void> {
    return this.channel.close(LONG);
  }

  #arrived(m: InboundMessage): void {
    m.release();
    const w = this.#waiting[this.#head];
    if (w === undefined) {
      this.#end(new Error(`echo channel ${this.channel.id}: a message nobody sent`));
      return;
    }
    this.#waiting[this.#head++] = undefined as never;
    // Compacted once drained, so the array does not grow with the messages sent.
    if (this.#head === this.#waiting.length) {
      this.#waiting.length = 0;
      this.#head = 0;
    }
    w.resolve();
  }

  #end(err: Error): void {
    this.#ended ??= err;
    const waiting = this.#waiting.splice(this.#head);
    this.#waiting.length = 0;
    this.#head = 0;
    for (const w of waiting) w.reject(this.#ended);
  }
}

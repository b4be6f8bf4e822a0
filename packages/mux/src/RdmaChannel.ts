import type { SendOptions } from './Channel.js';
import { ChannelCore } from './ChannelCore.js';
import type { InboundMessage, OutboundMessage } from './Message.js';
import type { RdmaConnection } from './RdmaConnection.js';

/** A place in a channel's arrival order held for a rendezvous message being read. */
export interface ArrivalSlot {
  m: InboundMessage | undefined;
}

/**
 * A channel of an RdmaConnection: the shared ChannelCore (receive queue, waits, close, fail)
 * plus the arrival order. A rendezvous message holds its place while it is being read, so
 * eager messages behind it wait (messages on a channel are delivered in order).
 */
export class RdmaChannel extends ChannelCore<RdmaConnection> {
  /** A Close arrived (it takes effect once every message before it was delivered). */
  closeReceived = false;
  /** Index of the connection's QP carrying this channel (fixed: keeps its order). */
  readonly lane: number;
  readonly #arrivals: ArrivalSlot[] = [];
  #arrivalHead = 0;

  constructor(connection: RdmaConnection, id: number, name: string, lane: number) {
    super(connection, id, name);
    this.lane = lane;
  }

  send(message: OutboundMessage, options?: SendOptions): Promise<void> {
    return this.connection.sendOn(this, message, options);
  }

  protected closed(): void {
    this.connection.channelClosed(this);
  }

  /** An eager message arrived in order. */
  arrive(m: InboundMessage): void {
    if (this.#arrivalHead === this.#arrivals.length) this.deliver(m);
    else this.#arrivals.push({ m });
  }

  /** A rendezvous message starts: its place in the order, filled by `fill()`. */
  reserve(): ArrivalSlot {
    const slot: ArrivalSlot = { m: undefined };
    this.#arrivals.push(slot);
    return slot;
  }

  fill(slot: ArrivalSlot, m: InboundMessage): void {
    slot.m = m;
    while (this.#arrivalHead < this.#arrivals.length) {
      const head = this.#arrivals[this.#arrivalHead] as ArrivalSlot;
      if (head.m === undefined) return;
      this.#arrivalHead++;
      const next = head.m;
      head.m = undefined;
      this.deliver(next);
    }
    this.#arrivals.length = 0;
    this.#arrivalHead = 0;
    if (this.closeReceived) this.peerClose();
  }

  /** The peer's Close arrived: effective after the messages before it. */
  arriveClose(): void {
    this.closeReceived = true;
    if (this.#arrivalHead === this.#arrivals.length) this.peerClose();
  }

  /** Failure also releases what waits in the arrival order. */
  override fail(err: Error): void {
    const was = this.state;
    super.fail(err);
    if (was === 'closed' || was === 'failed') return;
    for (const a of this.#arrivals) a.m?.release();
    this.#arrivals.length = 0;
    this.#arrivalHead = 0;
  }
}

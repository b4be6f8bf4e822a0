import type { Connection } from './Connection.js';
import type { InboundMessage, OutboundMessage } from './Message.js';
import type { ChannelStats } from './Stats.js';
import type { WaitOptions } from './WaitOptions.js';

/**
 * 'open' → 'closing' (close() called, pending sends flushing) → 'closed'; 'failed' when the
 * connection failed (every call rejects with the connection's error).
 */
export type ChannelState = 'open' | 'closing' | 'closed' | 'failed';

export interface SendOptions extends WaitOptions {
  /**
   * Hand the message's blocks over to the transport: it releases them once sent (or
   * failed). Without it the caller keeps them and may reuse them once `send()` settles.
   */
  transfer?: boolean;
}

export interface ReceiveOptions extends WaitOptions {
  /** Copy the bytes out and release the transport's memory at once. */
  copy?: boolean;
}

/**
 * A logical, ordered, message-oriented stream multiplexed with many others on one
 * connection. Either side opens one with `connection.openChannel(name)`; the other side
 * sees it in the connection's `'channel'` event. Messages on a channel arrive intact and in
 * order; channels do not order against each other.
 */
export interface Channel {
  /** Chosen by the opener: odd when the client opened it, even for the server (never 0). */
  readonly id: number;
  /** A label given by the opener (not unique; at most 255 UTF-8 bytes). */
  readonly name: string;
  readonly state: ChannelState;
  readonly connection: Connection;
  /**
   * Sends one message (all parts, in order, as one message). Resolves once the transport no
   * longer needs the parts' memory; waits while the connection's send window is full
   * (backpressure), until the deadline. Rejects with ERR_MUX_TOO_LARGE, ERR_MUX_DEADLINE,
   * ERR_MUX_ABORTED, ERR_MUX_CLOSED or the connection's failure.
   */
  send(message: OutboundMessage, options?: SendOptions): Promise<void>;
  /**
   * The next message, in order. Rejects with ERR_MUX_CLOSED once the peer closed the
   * channel and every message before its close was received.
   */
  receive(options?: ReceiveOptions): Promise<InboundMessage>;
  /**
   * Hands every message, in order, to `onMessage` as it arrives (queued ones at once) instead
   * of keeping it for `receive()`: no promise, timer or wake-up per message, for a reader that
   * takes everything anyway. Each message is the handler's to release. `onEnd` is called once
   * when nothing more will arrive: ERR_MUX_CLOSED after the peer's close (or this side's), or
   * the connection's failure. A handler must not throw (a throw is rethrown on its own tick).
   * Once listening, `receive()` rejects with ERR_MUX_INVALID_ARG; so does `listen()` twice or
   * with a receive pending (thrown).
   */
  listen(onMessage: (m: InboundMessage) => void, onEnd: (err: Error) => void): void;
  /** Every message until the peer closes the channel. Release each one. */
  [Symbol.asyncIterator](): AsyncIterator<InboundMessage>;
  /**
   * Graceful and idempotent: no more sends; resolves when the close has been sent after every
   * pending send. Unreceived messages are released.
   */
  close(options?: WaitOptions): Promise<void>;
  stats(): ChannelStats;
}

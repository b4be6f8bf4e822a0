import type { EventEmitter } from 'node:events';
import type { Channel } from './Channel.js';
import type { ReadDescriptor } from './ReadDescriptor.js';
import type { ReadList } from './ReadList.js';
import type { ConnectionStats } from './Stats.js';
import type { WaitOptions } from './WaitOptions.js';

/**
 * ```
 * handshaking ──► open ──► closing ──► closed
 *      │           │          │
 *      └───────────┴──────────┴──► failed   (peer lost, protocol error, destroy(err))
 * ```
 * Connections reach users in 'open' (`connect` and the listener's `'connection'` resolve
 * after the handshake).
 */
export type ConnectionState = 'handshaking' | 'open' | 'closing' | 'closed' | 'failed';

export interface ConnectionEvents {
  /** The peer opened a channel. */
  channel: [channel: Channel];
  /** Every state change, once. */
  state: [state: ConnectionState];
  /** The connection failed; every pending operation rejected with `error`. */
  error: [error: Error];
  /** Terminal: 'closed' or 'failed' was reached. */
  close: [error: Error | undefined];
  /**
   * RDMA: one-sided reads stopped working on this connection (its read QP failed: a READ the
   * peer refused, or a read abandoned at its deadline or abort); `supportsRead` is false from
   * now on, the channels go on. Once per connection; `error` is what reads fail with
   * (ERR_MUX_READ_FAILED, retryable: a new connection reads again).
   */
  readsFailed: [error: Error];
}

/** A connection to one peer, after mutual authentication. */
export interface Connection extends EventEmitter<ConnectionEvents> {
  readonly state: ConnectionState;
  readonly role: 'client' | 'server';
  /** `host:port` (or the transport's equivalent) of the peer. */
  readonly remoteAddress: string;
  /** The error that failed the connection, once failed. */
  readonly error: Error | undefined;
  /** Opens a channel; usable at once (the peer learns of it before its first message). */
  openChannel(name?: string): Channel;
  /** Open channels (either side opened). */
  readonly channelCount: number;
  /**
   * Graceful and idempotent: every open channel closes, pending sends flush, the peer is
   * told, then the link closes. Past the deadline the connection is destroyed.
   */
  close(options?: WaitOptions): Promise<void>;
  /** Fails everything pending (and every channel) with `error` (default ERR_MUX_CLOSED). */
  destroy(error?: Error): void;
  stats(): ConnectionStats;
  /**
   * Whether `read()` works here: over RDMA until its read QP failed (then false for good: see
   * the 'readsFailed' event), never over TCP.
   */
  readonly supportsRead: boolean;
  /**
   * One-sided batched read of a peer's read region (`RdmaTransport.allocReadRegion()` on
   * its side) into this side's registered memory, without the peer's CPU. Transports
   * without it (TCP) throw ERR_MUX_NOT_SUPPORTED; see RdmaConnection.read for the rest.
   */
  read(descriptor: ReadDescriptor, list: ReadList, options?: WaitOptions): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

import type { EventEmitter } from 'node:events';
import type { Connection } from './Connection.js';
import type { WaitOptions } from './WaitOptions.js';

/** The secret both sides hold (at least `MIN_SECRET_BYTES`, 32, random bytes); it never goes on the wire. */
export type SharedSecret = string | Uint8Array;

export interface ListenOptions {
  /** Default '127.0.0.1'. */
  host?: string;
  /** Default 0 (any free port; see `listener.port`). */
  port?: number;
  secret: SharedSecret;
}

export interface ConnectOptions extends WaitOptions {
  host?: string;
  port: number;
  secret: SharedSecret;
}

export interface ListenerEvents {
  /** A peer connected and passed the handshake. */
  connection: [connection: Connection];
  /** A peer failed the handshake (wrong version, wrong secret, malformed, too slow). */
  reject: [error: Error, remoteAddress: string];
  error: [error: Error];
}

export interface Listener extends EventEmitter<ListenerEvents> {
  readonly host: string;
  readonly port: number;
  /** Stops accepting; connections already made stay open. Idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A way to reach peers: TCP (`@rdmajs/tcp`), RDMA (`RdmaTransport`). */
export interface Transport {
  readonly name: string;
  listen(options: ListenOptions): Promise<Listener>;
  /** Resolves once connected and mutually authenticated. */
  connect(options: ConnectOptions): Promise<Connection>;
}

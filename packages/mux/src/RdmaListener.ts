import { EventEmitter } from 'node:events';
import type net from 'node:net';
import type { Listener, ListenerEvents } from './Transport.js';

/** The control-connection listener of an RdmaTransport; emits set-up connections. */
export class RdmaListener extends EventEmitter<ListenerEvents> implements Listener {
  readonly host: string;
  readonly #server: net.Server;
  /** @internal Sockets still in the handshake or setup: close() destroys them. */
  readonly pending = new Set<net.Socket>();
  #closed = false;
  #port = 0;

  /** @internal made by RdmaTransport.listen(). */
  constructor(server: net.Server, host: string) {
    super();
    this.#server = server;
    this.host = host;
  }

  /** The port listened on (still known after close). */
  get port(): number {
    if (this.#port === 0) {
      const a = this.#server.address();
      if (typeof a === 'object' && a !== null) this.#port = a.port;
    }
    return this.#port;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Stops accepting; connections already made stay open. Idempotent. */
  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    this.#server.close();
    for (const s of this.pending) s.destroy();
    this.pending.clear();
    return new Promise<void>((resolve) => setImmediate(resolve));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

import type { Channel, Connection } from '@rdmajs/mux';
import type { DeduplicationTable } from './DeduplicationTable.js';
import type { MethodRegistry } from './MethodRegistry.js';

export interface RpcServerOptions {
  /** Epoch stamped on replies. Default 1. */
  epoch?: number;
  /** With `sessionId`: non-idempotent calls run at most once per (session, sequence). */
  dedup?: DeduplicationTable;
  sessionId?: string;
}

/**
 * Serves a MethodRegistry on every channel a peer opens on `connection`. A malformed frame
 * destroys that connection (its request ids cannot be trusted); nothing a peer sends throws.
 */
export class RpcServer {
  readonly #registry: MethodRegistry;
  readonly #options: RpcServerOptions;

  constructor(registry: MethodRegistry, options: RpcServerOptions = {}) {
    this.#registry = registry;
    this.#options = options;
  }

  serve(connection: Connection): void {
    connection.on('channel', (ch) => {
      void this.#serveChannel(connection, ch);
    });
  }

  async #serveChannel(connection: Connection, ch: Channel): Promise<void> {
    const scope = {
      epoch: this.#options.epoch ?? 1,
      ...(this.#options.sessionId === undefined ? {} : { sessionId: this.#options.sessionId }),
      ...(this.#options.dedup === undefined ? {} : { dedup: this.#options.dedup }),
    };
    try {
      for (;;) {
        const msg = await ch.receive({ copy: true });
        const bytes = msg.bytes;
        msg.release();
        // Requests run concurrently; each reply goes out when its handler settles.
        this.#registry.dispatch(bytes, scope).then(
          (parts) => {
            if (parts !== undefined) ch.send(parts).catch(() => {});
          },
          (err: unknown) => connection.destroy(err instanceof Error ? err : undefined),
        );
      }
    } catch {
      // Channel closed or connection lost: nothing left to answer.
    }
  }
}

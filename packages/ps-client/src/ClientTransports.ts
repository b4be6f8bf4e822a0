import { RdmaTransport, type RdmaTransportOptions, type Transport } from '@rdmajs/mux';
import { PS_CREDIT_FLUSH_MS } from '@rdmajs/ps-wire';
import { TcpTransport, type TcpTransportOptions } from '@rdmajs/tcp';
import { PsClientError } from './errors.js';
import type { PushAllocator } from './PushBlocks.js';

/** A caller's transport options, with the PS's credit flush delay unless it chose one. */
export function withPsCreditFlush<T extends { creditFlushMs?: number }>(o: T | undefined): T {
  // `?? ` and not a spread under it: an explicit `creditFlushMs: undefined` keeps the PS's.
  return { ...o, creditFlushMs: o?.creditFlushMs ?? PS_CREDIT_FLUSH_MS } as T;
}

/** How a client reaches its shards. */
export type TransportChoice = 'rdma' | 'tcp' | 'auto';

/** Ports of one shard per transport (a shard listening on RDMA and TCP has one each). */
export interface TransportPorts {
  rdma?: number;
  tcp?: number;
}

/** What a shard link connects with: the primary transport and, for 'auto', TCP behind it. */
export interface LinkTransport {
  readonly primary: Transport;
  /** The name the shard's `ports` are looked up by for the primary (`'rdma'`, `'tcp'`, or the custom transport's name). */
  readonly primaryName: string;
  readonly fallback: Transport | undefined;
  readonly probeIntervalMs: number;
}

/**
 * The transports of one client, made from its `transport` option: `'tcp'`, `'rdma'` (an
 * RdmaTransport, soft provider unless `rdma.device` says otherwise), `'auto'` (RDMA, each
 * connection falling back to TCP when RDMA cannot be set up, and probing RDMA again), or a
 * Transport of the caller's (not closed here). An RdmaTransport made here (its device, PD and
 * allocator) is closed with the client.
 */
export class ClientTransports {
  readonly choice: TransportChoice | 'custom';
  readonly link: LinkTransport;
  readonly #owned: RdmaTransport[];

  private constructor(
    choice: TransportChoice | 'custom',
    link: LinkTransport,
    owned: RdmaTransport[],
  ) {
    this.choice = choice;
    this.link = link;
    this.#owned = owned;
  }

  /** Throws ERR_PS_CLIENT_INVALID_ARG unless `transport` is a choice or a Transport. */
  static check(transport: unknown): void {
    if (transport !== null && typeof transport === 'object') {
      const t = transport as Partial<Transport>;
      if (typeof t.connect === 'function' && typeof t.name === 'string') return;
    } else if (transport === 'rdma' || transport === 'tcp' || transport === 'auto') return;
    throw new PsClientError(
      'ERR_PS_CLIENT_INVALID_ARG',
      `transport must be 'rdma', 'tcp', 'auto' or a Transport, got ${describe(transport)}`,
    );
  }

  static of(
    transport: unknown,
    rdma: RdmaTransportOptions | undefined,
    tcpOptions: TcpTransportOptions | undefined,
    probeIntervalMs: number,
  ): ClientTransports {
    ClientTransports.check(transport);
    if (typeof transport === 'object') {
      const t = transport as Transport;
      const custom = { primary: t, primaryName: t.name, fallback: undefined };
      return new ClientTransports('custom', { ...custom, probeIntervalMs }, []);
    }
    if (transport === 'tcp') {
      const tcp = new TcpTransport(withPsCreditFlush(tcpOptions));
      const link = { primary: tcp, primaryName: 'tcp', fallback: undefined, probeIntervalMs };
      return new ClientTransports('tcp', link, []); // nothing to close: it holds no resources
    }
    // Made lazily by mux: the device opens on the first connect, so 'auto' without any RDMA
    // device still works (its connects fail and fall back).
    const r = new RdmaTransport(withPsCreditFlush(rdma));
    if (transport === 'rdma') {
      const link = { primary: r, primaryName: 'rdma', fallback: undefined, probeIntervalMs };
      return new ClientTransports('rdma', link, [r]);
    }
    const tcp = new TcpTransport(withPsCreditFlush(tcpOptions));
    const link = { primary: r, primaryName: 'rdma', fallback: tcp, probeIntervalMs };
    return new ClientTransports('auto', link, [r]);
  }

  /**
   * The registered memory of the primary transport when it is an RdmaTransport (its device
   * open: call after connecting), else undefined. Pushes are built in it (see PushBlocks).
   */
  get allocator(): PushAllocator | undefined {
    const p = this.link.primary;
    if (!(p instanceof RdmaTransport)) return undefined;
    try {
      return p.allocator;
    } catch {
      return undefined; // closed
    }
  }

  /** Frees the RDMA transport made here (after the links closed their connections). */
  close(): void {
    for (const t of this.#owned) {
      try {
        t.close();
      } catch {
        // already closed
      }
    }
  }
}

function describe(x: unknown): string {
  if (typeof x === 'string') return JSON.stringify(x.slice(0, 32));
  if (x === null) return 'null';
  return typeof x;
}

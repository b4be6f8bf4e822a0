import type { Transport } from '@rdmajs/mux';
import { transportChannel } from './diagnostics.js';
import { RpcError } from './errors.js';
import { checkInt } from './internal/validate.js';

/**
 * Where a client goes when its primary transport (RDMA) cannot set a connection up: no
 * device, a QP that fails to come up, a peer without RDMA. Per connection: each (re)connect
 * tries the primary first; while on the fallback the primary is probed, and the session
 * moves back once a probe connects. Off unless given: a silent downgrade from RDMA to TCP
 * changes latency and CPU, so it is the deployment's choice.
 */
export interface FallbackOptions {
  /** E.g. a `TcpTransport`. */
  transport: Transport;
  /** Default: the primary's host. */
  host?: string;
  /** Default: the primary's port (a peer whose one listener has no RDMA). */
  port?: number;
  /** While on the fallback, the primary is tried this often, ms; 0: never. Default 30 000. */
  probeIntervalMs?: number;
}

export interface ResolvedFallback {
  readonly transport: Transport;
  readonly host: string | undefined;
  readonly port: number | undefined;
  readonly probeIntervalMs: number;
}

export function resolveFallback(f: FallbackOptions | undefined): ResolvedFallback | undefined {
  if (f === undefined) return undefined;
  if (f === null || typeof f !== 'object' || typeof f.transport?.connect !== 'function') {
    throw new RpcError('ERR_RPC_INVALID_ARG', 'fallback needs { transport }');
  }
  return {
    transport: f.transport,
    host: f.host,
    port: f.port === undefined ? undefined : checkInt('fallback.port', f.port, 1, 65_535),
    probeIntervalMs: checkInt('fallback.probeIntervalMs', f.probeIntervalMs ?? 30_000, 0),
  };
}

/** Which transport a session's connection runs on, as the 'transport' event and channel carry it. */
export interface TransportChange {
  readonly sessionId: string | undefined;
  /** Transport name of the previous connection (undefined for the first). */
  readonly from: string | undefined;
  readonly to: string;
  /** True when `to` is the fallback. */
  readonly fallback: boolean;
  /** Why the primary was not used (its connect error), or undefined when it was. */
  readonly reason: Error | undefined;
  readonly at: number;
}

/** Publishes on `rdmajs:rpc:transport` when someone listens. */
export function publishTransportChange(change: TransportChange): void {
  if (transportChannel.hasSubscribers) transportChannel.publish(change);
}

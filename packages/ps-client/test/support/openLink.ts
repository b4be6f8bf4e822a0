// A ShardLink to one local port with the tests' small bounds (one place for its options).
import type { Transport } from '@rdmajs/mux';
import { ShardLink, type ShardLinkOptions } from '../../src/ShardLink.js';

export function openLink(
  transport: Transport,
  secret: string,
  port: number,
  extra: Partial<ShardLinkOptions> = {},
): Promise<ShardLink> {
  return ShardLink.open({
    transport: { primary: transport, primaryName: 'tcp', fallback: undefined, probeIntervalMs: 0 },
    secret,
    address: { host: '127.0.0.1', port },
    label: 'a',
    connectTimeoutMs: 5000,
    reconnectBudgetMs: 5000,
    maxInFlightPushes: 4,
    maxQueuedPushes: 64,
    maxQueuedPushBytes: 1 << 20,
    heartbeatIntervalMs: 1000,
    heartbeatMisses: 3,
    ...extra,
  });
}

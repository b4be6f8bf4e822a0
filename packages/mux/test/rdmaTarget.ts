import { fileURLToPath } from 'node:url';
import { RdmaTransport, type RdmaTransportOptions } from '../src/index.js';
import type { ContractTarget, ContractTransportOptions } from './contract/index.js';

/**
 * The contract suite's knobs as RdmaTransport options. RDMA receives into memory registered
 * with the transport's own device, so the suite's `receiveAllocator` (a heap allocator) is
 * replaced by `transport.allocator` (see `receiveAllocatorOf`): the suite builds its blocks
 * there and checks that allocator's leak report.
 */
export function rdmaTransport(
  o: ContractTransportOptions,
  extra: RdmaTransportOptions = {},
): RdmaTransport {
  const options: RdmaTransportOptions = { ...extra };
  if (o.maxMessageBytes !== undefined) options.maxMessageBytes = o.maxMessageBytes;
  if (o.windowBytes !== undefined) options.windowBytes = o.windowBytes;
  if (o.windowMessages !== undefined) options.windowMessages = o.windowMessages;
  if (o.heartbeatIntervalMs !== undefined) options.heartbeatIntervalMs = o.heartbeatIntervalMs;
  if (o.peerTimeoutMs !== undefined) options.peerTimeoutMs = o.peerTimeoutMs;
  if (o.defaultTimeoutMs !== undefined) options.defaultTimeoutMs = o.defaultTimeoutMs;
  if (o.protocolVersion !== undefined) options.protocolVersion = o.protocolVersion;
  // Every test's client QPs come up with rnrRetry 0 (PeerResources): an RNR fails loudly.
  return new RdmaTransport(options);
}

export const rdmaTarget: ContractTarget = {
  name: 'rdma (soft provider)',
  transport: (o) => rdmaTransport(o, { qpPoolSize: 2 }),
  peerScript: fileURLToPath(new URL('./fixtures/rdma-contract-peer.ts', import.meta.url)),
  receiveAllocatorOf: (t) => (t as RdmaTransport).allocator,
};

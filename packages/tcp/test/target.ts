import { fileURLToPath } from 'node:url';
import type { ContractTarget, ContractTransportOptions } from '@rdmajs/mux/contract';
import { TcpTransport, type TcpTransportOptions } from '../src/index.js';

/** The contract suite's knobs as TcpTransport options. */
export function tcpTransport(o: ContractTransportOptions): TcpTransport {
  const options: TcpTransportOptions = {};
  if (o.maxMessageBytes !== undefined) options.maxMessageBytes = o.maxMessageBytes;
  if (o.windowBytes !== undefined) options.windowBytes = o.windowBytes;
  if (o.windowMessages !== undefined) options.windowMessages = o.windowMessages;
  if (o.heartbeatIntervalMs !== undefined) options.heartbeatIntervalMs = o.heartbeatIntervalMs;
  if (o.peerTimeoutMs !== undefined) options.peerTimeoutMs = o.peerTimeoutMs;
  if (o.defaultTimeoutMs !== undefined) options.defaultTimeoutMs = o.defaultTimeoutMs;
  if (o.protocolVersion !== undefined) options.protocolVersion = o.protocolVersion;
  if (o.receiveAllocator !== undefined) options.receiveAllocator = o.receiveAllocator;
  return new TcpTransport(options);
}

export const tcpTarget: ContractTarget = {
  name: 'tcp',
  transport: tcpTransport,
  peerScript: fileURLToPath(new URL('./fixtures/contract-peer.ts', import.meta.url)),
};

// The transports the fault matrix runs over, made the same way in tests and forked peers.
import { RdmaTransport, type Transport } from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';

export type TransportKind = 'tcp' | 'rdma';

/** Mux heartbeats far slower than the RPC ones: the session, not mux, detects silence here. */
export function makeTransport(kind: TransportKind): Transport & { close?: () => void } {
  if (kind === 'tcp') return new TcpTransport({ peerTimeoutMs: 60_000 });
  return new RdmaTransport({ peerTimeoutMs: 60_000, recvBufferCount: 64 });
}

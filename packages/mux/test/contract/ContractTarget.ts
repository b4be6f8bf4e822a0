import type { RegisteredAllocator } from '@rdmajs/allocator';
import type { Transport } from '../../src/index.js';

/**
 * Transport knobs the contract suite needs; each target maps them to its own options.
 * Everything but `receiveAllocator` also reaches the forked peer (as JSON).
 */
export interface ContractTransportOptions {
  /** Largest message this side accepts. */
  maxMessageBytes?: number;
  /** Receive window in bytes (what the peer may have sent and this side not released). */
  windowBytes?: number;
  windowMessages?: number;
  heartbeatIntervalMs?: number;
  /** A silent peer fails the connection with ERR_MUX_PEER_TIMEOUT after this long. */
  peerTimeoutMs?: number;
  defaultTimeoutMs?: number;
  /** Protocol version to announce (only to test version rejection). */
  protocolVersion?: number;
  /** Where inbound messages that need assembling live (checked for leaks). */
  receiveAllocator?: RegisteredAllocator;
}

/** What a transport implementation hands the contract suite. */
export interface ContractTarget {
  readonly name: string;
  transport(options: ContractTransportOptions): Transport;
  /**
   * A script that calls `runContractPeer` with this transport. It is forked with
   * `--conditions=@rdmajs/source --import tsx`, so it may import workspace sources.
   */
  readonly peerScript: string;
  /**
   * The allocator the suite checks for leaks and builds blocks in, when the transport keeps
   * received messages in memory of its own rather than in `receiveAllocator` (RDMA receives
   * into memory registered with its device). Default: the `receiveAllocator` given.
   */
  receiveAllocatorOf?(transport: Transport, given: RegisteredAllocator): RegisteredAllocator;
}

// The credit flush delay PsClient gives the transports it makes, for callers that make
// their own (one transport shared by several clients).
export { PS_CREDIT_FLUSH_MS } from '@rdmajs/ps-wire';
export type { TransportChoice, TransportPorts } from './ClientTransports.js';
export { EtcdShardMap, type EtcdShardMapOptions } from './EtcdShardMap.js';
export { PsClientError, type PsClientErrorCode } from './errors.js';
export {
  type CallDeadline,
  type MissingRows,
  type PartialPull,
  PsClient,
  type PsClientOptions,
  type PsClientStats,
  type PullOptions,
  type PushSummary,
  type ShardSpec,
} from './PsClient.js';
export { PulledRows } from './PulledRows.js';
export type { PushBlocksStats } from './PushBlocks.js';
export type { ShardAddress, ShardLinkState, ShardLinkStats } from './ShardLink.js';
export { rendezvousScore, ShardRouter, shardSeed } from './ShardRouter.js';

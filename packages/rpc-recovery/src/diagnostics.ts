import diagnostics_channel from 'node:diagnostics_channel';

/**
 * `node:diagnostics_channel` names this package publishes on, so APM tools can subscribe
 * without depending on it. Messages are the same objects the typed events carry.
 */
export const DIAGNOSTICS_CHANNELS = Object.freeze({
  /** Every session state change: a `SessionStateChange`. */
  sessionState: 'rdmajs:rpc:session:state',
  /** A completion or reply dropped for its epoch: a `StaleEpochDrop`. */
  staleEpoch: 'rdmajs:rpc:session:stale-epoch',
  /** A session's connection changed transport (fallback to TCP, back to RDMA): a `TransportChange`. */
  transport: 'rdmajs:rpc:transport',
});

export const sessionStateChannel = diagnostics_channel.channel(DIAGNOSTICS_CHANNELS.sessionState);
export const staleEpochChannel = diagnostics_channel.channel(DIAGNOSTICS_CHANNELS.staleEpoch);
export const transportChannel = diagnostics_channel.channel(DIAGNOSTICS_CHANNELS.transport);

export type { ContractTransportOptions } from './ContractTarget.js';
export { runContractPeer } from './peer.js';

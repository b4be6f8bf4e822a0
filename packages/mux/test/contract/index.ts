export type { ContractTarget, ContractTransportOptions } from './ContractTarget.js';
export { describeTransportContract, heapAllocator } from './suite.js';

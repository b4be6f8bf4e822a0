export { ACCESS_POLICIES, Access, type AccessPolicy, accessFlags } from './AccessPolicy.js';
export type { ArenaStats } from './Arena.js';
export { Block, BlockSlice, type BlockState, type Sge } from './Block.js';
export {
  AllocError,
  type AllocErrorCode,
  type AllocErrorOptions,
  AllocLimitError,
  AllocRegistrationError,
  AllocUseAfterReleaseError,
} from './errors.js';
export {
  fromProtectionDomain,
  type MemoryRegionLike,
  type ProtectionDomainLike,
  verbsRegistrar,
} from './fromProtectionDomain.js';
export {
  type AllocatorState,
  type AllocatorStats,
  type LeakReport,
  type LiveBlockInfo,
  type PeerPoolOptions,
  RegisteredAllocator,
  type RegisteredAllocatorOptions,
  type SizeClassStats,
} from './RegisteredAllocator.js';
export type { Region, Registrar } from './Registrar.js';
export {
  RegisteredBuffer,
  RegistrationCache,
  type RegistrationCacheOptions,
  type RegistrationCacheState,
  type RegistrationCacheStats,
} from './RegistrationCache.js';

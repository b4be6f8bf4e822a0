import { RegisteredAllocator, type RegisteredAllocatorOptions } from './RegisteredAllocator.js';
import type { Region, Registrar } from './Registrar.js';

/**
 * The part of a verbs `MemoryRegion` the allocator uses (structural: no import of
 * @rdmajs/verbs). `bytes` is the registered memory itself; `deregister()` is idempotent.
 */
export interface MemoryRegionLike extends Region {
  readonly length: number;
  readonly access: number;
  deregister(): void;
}

/** The part of a verbs `ProtectionDomain` the allocator uses. */
export interface ProtectionDomainLike {
  /** Allocates and registers `length` zero-filled bytes (provider memory: shared segments for soft). */
  allocMr(length: number, access: number): MemoryRegionLike;
  /** Registers the caller's memory in place. */
  regMr(buffer: Uint8Array, access: number): MemoryRegionLike;
}

/**
 * A Registrar over a verbs protection domain: arenas and dedicated blocks from
 * `pd.allocMr`, application buffers (the registration cache) through `pd.regMr`. Also what
 * a benchmark times for the per-message-registration baseline.
 */
export function verbsRegistrar(pd: ProtectionDomainLike): Registrar<MemoryRegionLike> {
  return {
    allocate: (length, access) => pd.allocMr(length, access),
    register: (bytes, access) => pd.regMr(bytes, access),
    deregister: (mr) => mr.deregister(),
  };
}

/**
 * A RegisteredAllocator whose memory is registered with `pd`. Close it before the PD
 * (closing the PD first deregisters the arenas under the allocator's blocks).
 */
export function fromProtectionDomain(
  pd: ProtectionDomainLike,
  options: Omit<RegisteredAllocatorOptions, 'registrar'> = {},
): RegisteredAllocator {
  return new RegisteredAllocator({ ...options, registrar: verbsRegistrar(pd) });
}

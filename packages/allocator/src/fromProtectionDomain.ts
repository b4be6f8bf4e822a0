import { invalidArg } from './errors.js';
import { describeValue, ownOptions } from './internal/validate.js';
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
  /** True once the PD (or its device) is closed; the allocator then closes with it. */
  readonly closed?: boolean;
}

function checkPd(pd: unknown, what: string): ProtectionDomainLike {
  const p = pd as Partial<ProtectionDomainLike> & { allocPd?: unknown };
  if (
    p === null ||
    typeof p !== 'object' ||
    typeof p.allocMr !== 'function' ||
    typeof p.regMr !== 'function'
  ) {
    const hint = typeof p?.allocPd === 'function' ? ' (this is a device: pass dev.allocPd())' : '';
    throw invalidArg(
      `${what} takes a protection domain (allocMr and regMr), got ${describeValue(pd)}${hint}`,
    );
  }
  return p as ProtectionDomainLike;
}

/**
 * A Registrar over a verbs protection domain: arenas and dedicated blocks from
 * `pd.allocMr`, application buffers (the registration cache) through `pd.regMr`, and
 * `closed` following `pd.closed`. Also what a benchmark times for the per-message-registration
 * baseline. Throws ERR_ALLOC_INVALID_ARG for anything that is not a PD.
 */
export function verbsRegistrar(pd: ProtectionDomainLike): Registrar<MemoryRegionLike> {
  const p = checkPd(pd, 'verbsRegistrar');
  return {
    allocate: (length, access) => p.allocMr(length, access),
    register: (bytes, access) => p.regMr(bytes, access),
    deregister: (mr) => mr.deregister(),
    get closed() {
      return p.closed === true;
    },
  };
}

/**
 * A RegisteredAllocator whose memory is registered with `pd`. It follows the PD's lifetime:
 * once the PD or its device is closed, the allocator is closed and its live blocks are
 * unusable (ERR_ALLOC_CLOSED). Close the allocator first for an orderly shutdown.
 */
export function fromProtectionDomain(
  pd: ProtectionDomainLike,
  options: Omit<RegisteredAllocatorOptions, 'registrar'> = {},
): RegisteredAllocator {
  const registrar = verbsRegistrar(checkPd(pd, 'fromProtectionDomain'));
  const own = ownOptions('fromProtectionDomain options', options);
  return new RegisteredAllocator({ ...own, registrar } as RegisteredAllocatorOptions);
}

/**
 * Memory registration, injected (as eRPC's allocator takes `reg_mr`/`dereg_mr` and brpc's
 * block pool a register callback), so the allocator never imports verbs at run time and
 * tests can run against an in-memory fake. `fromProtectionDomain` binds one to a verbs PD.
 */

/** Registered memory as the allocator sees it. A verbs `MemoryRegion` is one as it is. */
export interface Region {
  /** View of the registered memory itself (no copy); its length is the region's length. */
  readonly bytes: Uint8Array;
  /** Address of `bytes[0]` in work requests (scatter/gather elements, remote addresses). */
  readonly addr: number;
  /** Key for local access (scatter/gather elements). */
  readonly lkey: number;
  /** Key a peer uses for one-sided READ/WRITE (meaningful when the access allows it). */
  readonly rkey: number;
}

/**
 * The registration functions. Calls are synchronous, like `ibv_reg_mr`. Throwing from any
 * of them is reported as ERR_ALLOC_REGISTRATION with the thrown value as `cause`.
 */
export interface Registrar<R extends Region = Region> {
  /**
   * Allocates `length` bytes of fresh registered memory with these access flags (arenas,
   * dedicated large blocks). Optional: without it the allocator registers a new
   * `Uint8Array(length)` with `register`. Providers whose own memory is cheaper for the
   * transport (the soft provider's shared segments, `pd.allocMr`) should implement it.
   */
  allocate?(length: number, access: number): R;
  /**
   * Registers memory the caller owns, in place: the returned region's `bytes` must be a
   * view of the same ArrayBuffer at the same offset (checked), never a copy.
   */
  register(bytes: Uint8Array, access: number): R;
  /** Deregisters a region this registrar returned. Called exactly once per region. */
  deregister(region: R): void;
  /**
   * Optional. True once the registrar is gone and took its registrations with it (a verbs
   * PD or its device closed). Read at every allocator and cache call and at every use of a
   * block: once it is true the allocator (and its cache) is closed, `alloc`/`acquire` throw
   * ERR_ALLOC_CLOSED, live blocks and buffers throw ERR_ALLOC_CLOSED when their memory or
   * keys are touched, their `release()` does nothing, and `deregister` is never called again.
   * A registrar without it is told nothing: close the allocator before what it registers with.
   */
  readonly closed?: boolean;
}

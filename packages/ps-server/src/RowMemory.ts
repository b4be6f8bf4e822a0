/**
 * Where row storage comes from. `RegisteredAllocator` from `@rdmajs/allocator` fits as it is
 * (its `alloc(n)` returns a Block with `bytes` and `release()`), so rows live in registered
 * memory and a reply can be gathered straight into a registered block; `heapRowMemory` is
 * plain memory for stores that never touch a NIC. Typed structurally: no runtime import.
 */
export interface RowMemory {
  alloc(bytes: number): RowBlock;
  /**
   * Optional: the one region of a `oneSidedRead` table (memory peers will READ, e.g. an RDMA
   * transport's read region). Without it the region comes from `alloc`.
   */
  allocReadable?(bytes: number, table: string): RowBlock;
}

export interface RowBlock {
  /** At least the requested bytes, 8-byte aligned (checked). */
  readonly bytes: Uint8Array;
  release(): void;
}

/** Row memory from the JS heap. */
export const heapRowMemory: RowMemory = {
  alloc(bytes: number): RowBlock {
    return { bytes: new Uint8Array(bytes), release() {} };
  },
};

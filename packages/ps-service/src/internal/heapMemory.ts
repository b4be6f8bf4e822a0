import { type Region, RegisteredAllocator } from '@rdmajs/allocator';
import type { ReplyMemory } from '@rdmajs/rpc-recovery';

/**
 * Arena size of a heap pool: a few hundred typical messages (tens of KiB) at once; the pool
 * grows by arenas of this size when more are live.
 */
const HEAP_ARENA_BYTES = 4 << 20;

/** Heap memory "registered" in place: nothing to register, no keys (never given to a NIC). */
const heapRegion = (bytes: Uint8Array): Region => ({ bytes, addr: 0, lkey: 0, rkey: 0 });

/**
 * An allocator of reused heap blocks, for a transport that copies bytes anyway (TCP: its
 * replies, and its arrivals that span socket chunks). A fresh `Uint8Array` per message is an
 * ArrayBuffer backing store, external memory that counts toward V8's global limit: under load
 * each one allocated and dropped brings the next full Mark-Compact nearer. Its blocks' keys
 * are not a NIC's: never hand them to an RDMA connection.
 */
export function heapAllocator(): RegisteredAllocator {
  return new RegisteredAllocator({
    registrar: { register: heapRegion, deregister: () => {} },
    arenaBytes: HEAP_ARENA_BYTES,
  });
}

/**
 * Reply memory of blocks of a heap allocator, marked not registered (see ReplyBuffer.registered).
 * At the allocator's limit a reply goes to the plain heap (undefined): the pool is shared by
 * every TCP connection of the service, and clients holding replies must not fail the others'.
 */
export function heapReplyMemory(allocator: RegisteredAllocator): ReplyMemory {
  return Object.assign(
    (n: number) => {
      try {
        return allocator.alloc(n);
      } catch (err) {
        if ((err as { code?: unknown }).code === 'ERR_ALLOC_LIMIT') return undefined;
        throw err;
      }
    },
    { registered: false },
  );
}

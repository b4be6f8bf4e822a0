import { type Region, RegisteredAllocator } from '@rdmajs/allocator';
import type { ReplyMemory } from '@rdmajs/rpc-recovery';

/**
 * Arena size of the heap reply pool: a few hundred typical pull replies (tens of KiB) at once;
 * the pool grows by arenas of this size when more are in flight.
 */
const HEAP_REPLY_ARENA_BYTES = 4 << 20;

/** Heap memory "registered" in place: nothing to register, no keys (never given to a NIC). */
const heapRegion = (bytes: Uint8Array): Region => ({ bytes, addr: 0, lkey: 0, rkey: 0 });

/**
 * Reply memory for connections whose transport copies the bytes anyway (TCP): blocks of
 * reused heap arenas, given back by the transport once written (`transfer`). Replies built
 * with a fresh `Uint8Array` each are ArrayBuffer backing stores that count as external memory
 * toward V8's global limit: under load each allocated-and-dropped one brings the next full
 * Mark-Compact nearer. Never handed to an RDMA connection: its keys are not a NIC's.
 */
export class HeapReplyPool {
  readonly #allocator = new RegisteredAllocator({
    registrar: { register: heapRegion, deregister: () => {} },
    arenaBytes: HEAP_REPLY_ARENA_BYTES,
  });

  /** The `ReplyMemory` to serve a connection with (marked not registered). */
  readonly memory: ReplyMemory = Object.assign((n: number) => this.#allocator.alloc(n), {
    registered: false,
  });

  /** Bytes held in arenas now (in use or kept for reuse). */
  get heldBytes(): number {
    return this.#allocator.registeredBytes;
  }

  /** Replies still out (being written) keep their blocks until released. */
  close(): void {
    this.#allocator.close();
  }
}

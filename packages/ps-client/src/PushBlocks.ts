import type { RdmaTransport } from '@rdmajs/mux';

/** The RDMA transport's allocator (its blocks are what mux sends in place). */
export type PushAllocator = RdmaTransport['allocator'];
/** A block of that allocator. */
export type PushBlock = ReturnType<PushAllocator['alloc']>;

/** Registered bytes that pushes may hold at once by default (sent, queued, or waiting to be freed). */
export const DEFAULT_MAX_PINNED_PUSH_BYTES = 64 << 20;

export interface PushBlocksStats {
  /** Blocks taken and not given back. */
  liveBlocks: number;
  /** Their bytes. */
  pinnedBytes: number;
  /** Requests encoded in a block, and those that went to heap buffers (bound reached, or no memory). */
  taken: number;
  refused: number;
}

/**
 * Push requests built in the RDMA transport's registered memory, so mux sends them as they
 * are (an eager SEND gathers the block; no copy of the gradients in JS). The allocator's
 * free lists are the pool: a block given back serves a later push of its size class. What
 * a burst may pin is bounded: past `maxPinnedBytes`, or when the allocator has no room, a
 * push is built on the heap as over TCP (undefined here) and mux copies it.
 */
export class PushBlocks {
  readonly #alloc: PushAllocator;
  readonly #maxPinnedBytes: number;
  #live = 0;
  #pinned = 0;
  #taken = 0;
  #refused = 0;

  constructor(alloc: PushAllocator, maxPinnedBytes = DEFAULT_MAX_PINNED_PUSH_BYTES) {
    this.#alloc = alloc;
    this.#maxPinnedBytes = maxPinnedBytes;
  }

  /** A block of exactly `length` bytes (contents stale), or undefined: use a heap buffer. */
  take(length: number): PushBlock | undefined {
    if (this.#pinned + length > this.#maxPinnedBytes) {
      this.#refused++;
      return undefined;
    }
    let block: PushBlock;
    try {
      block = this.#alloc.alloc(length, 'local');
    } catch {
      // ERR_ALLOC_LIMIT (the transport's registration budget) or a closed allocator.
      this.#refused++;
      return undefined;
    }
    this.#live++;
    this.#pinned += length;
    this.#taken++;
    return block;
  }

  /** Gives back a block of `take` that nothing can read any more (exactly once). */
  give(block: PushBlock): void {
    this.#live--;
    this.#pinned -= block.length;
    if (block.state === 'live') block.release(); // 'revoked': the allocator is gone already
  }

  stats(): PushBlocksStats {
    return {
      liveBlocks: this.#live,
      pinnedBytes: this.#pinned,
      taken: this.#taken,
      refused: this.#refused,
    };
  }
}

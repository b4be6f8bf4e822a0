import type { MessagePart, RdmaTransport } from '@rdmajs/mux';
import { classOf, MAX_CLASS } from './internal/RequestBuffers.js';

/** The RDMA transport's allocator (its blocks are what mux sends in place). */
export type PushAllocator = RdmaTransport['allocator'];
/** A block of that allocator. */
export type PushBlock = ReturnType<PushAllocator['alloc']>;
/** What a push request is sent as: a block, or the first `length` bytes of one. */
export type PushPart = Exclude<MessagePart, Uint8Array>;

/** Registered bytes that pushes may hold at once by default (sent, queued, or waiting to be freed). */
export const DEFAULT_MAX_PINNED_PUSH_BYTES = 64 << 20;
/** Free blocks kept for the next pushes, in all (the classes are RequestBuffers'). */
const MAX_FREE_BYTES = 16 << 20;

export interface PushBlocksStats {
  /** Blocks holding requests not given back yet. */
  liveBlocks: number;
  /** Their bytes (each a power-of-two block). */
  pinnedBytes: number;
  /** Requests built in a block, and those that went to heap buffers (bound reached, or no memory). */
  taken: number;
  refused: number;
}

/**
 * Push requests built in the RDMA transport's registered memory, for mux to send without a
 * copy in JS (today mux copies RpcClient's [header, block] into its send slot all the same:
 * see the README). Blocks come in power-of-two sizes and are kept on per-size free lists
 * once given back, last in first out, as RequestBuffers keeps heap buffers: a burst reuses
 * blocks still in cache (a fresh block per request cost more client CPU in the incast). A
 * request shorter than its block goes as a slice of it. What a burst may pin is bounded:
 * past `maxPinnedBytes`, or when the allocator has no room, a push is built on the heap as
 * over TCP (undefined here).
 */
export class PushBlocks {
  readonly #alloc: PushAllocator;
  readonly #maxPinnedBytes: number;
  readonly #free: PushBlock[][] = Array.from({ length: MAX_CLASS + 1 }, () => []);
  #freeBytes = 0;
  /**
   * The last slice handed out of each kept block: a steady stream of same-size pushes
   * reuses it (and its cached view) instead of a new BlockSlice per push. Bounded by the
   * blocks pinned; entries leave with their block's release.
   */
  readonly #slices = new Map<PushBlock, PushPart>();
  #closed = false;
  #live = 0;
  #pinned = 0;
  #taken = 0;
  #refused = 0;

  constructor(alloc: PushAllocator, maxPinnedBytes = DEFAULT_MAX_PINNED_PUSH_BYTES) {
    this.#alloc = alloc;
    this.#maxPinnedBytes = maxPinnedBytes;
  }

  /** Exactly `length` bytes of a block (contents stale), or undefined: use a heap buffer. */
  take(length: number): PushPart | undefined {
    const c = classOf(length);
    const size = c > MAX_CLASS ? length : 1 << c;
    if (this.#pinned + size > this.#maxPinnedBytes) {
      this.#refused++;
      return undefined;
    }
    let block = c > MAX_CLASS ? undefined : (this.#free[c] as PushBlock[]).pop();
    if (block !== undefined) this.#freeBytes -= size;
    else {
      try {
        block = this.#alloc.alloc(size, 'local');
      } catch {
        // ERR_ALLOC_LIMIT (the transport's registration budget) or a closed allocator.
        this.#refused++;
        return undefined;
      }
    }
    this.#live++;
    this.#pinned += size;
    this.#taken++;
    if (length === size) return block;
    let slice = this.#slices.get(block);
    if (slice === undefined || slice.length !== length) {
      slice = block.slice(0, length);
      this.#slices.set(block, slice);
    }
    return slice;
  }

  /** Gives back a part from `take` that nothing can read any more (exactly once). */
  give(part: PushPart): void {
    const block = (part as { block?: PushBlock }).block ?? (part as PushBlock);
    const size = block.length;
    this.#live--;
    this.#pinned -= size;
    const c = classOf(size);
    if (
      !this.#closed &&
      block.state === 'live' &&
      c <= MAX_CLASS &&
      size === 1 << c &&
      this.#freeBytes + size <= MAX_FREE_BYTES
    ) {
      this.#freeBytes += size;
      (this.#free[c] as PushBlock[]).push(block);
      return;
    }
    this.#slices.delete(block);
    if (block.state === 'live') block.release(); // 'revoked': the allocator is gone already
  }

  /** Releases the kept free blocks (the client is closing; given-back parts are released too). */
  close(): void {
    this.#closed = true;
    for (const list of this.#free) {
      for (const b of list.splice(0)) if (b.state === 'live') b.release();
    }
    this.#slices.clear();
    this.#freeBytes = 0;
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

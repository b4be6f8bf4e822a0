import type { AccessPolicy } from '../AccessPolicy.js';
import type { Arena } from '../Arena.js';
import { Block, BlockKind, type BlockOwner } from '../Block.js';
import { findUnpoisoned, poison } from './debug.js';
import { FreeRunIndex } from './FreeRunIndex.js';
import { PAGE_BYTES, PAGE_SHIFT, SIZE_CLASSES, sizeClassIndex } from './SizeClasses.js';
import { SizeClassPool, Slab } from './Slab.js';

/** What a heap needs from its allocator. */
export interface HeapHost {
  readonly debug: boolean;
  readonly owner: BlockOwner;
  /**
   * Makes room for a run of `pages` pages in `heap`: registers a new arena, or reclaims
   * space. Throws ERR_ALLOC_LIMIT or ERR_ALLOC_REGISTRATION when it cannot.
   */
  grow(heap: Heap, pages: number): void;
  /** `arena` of `heap` has no pages in use any more. */
  arenaEmptied(heap: Heap, arena: Arena): void;
  /** Debug: memory about to be handed out was written after its release. Throws. */
  corrupted(arena: Arena, offset: number): never;
}

/**
 * The arenas of one access policy and what is carved from them: slabs per size class for
 * small blocks, page runs for large ones. Allocation is O(1) for small blocks (a slot stack)
 * and a bin lookup for large ones (best fit over all arenas of the heap).
 */
export class Heap {
  readonly policy: AccessPolicy;
  readonly flags: number;
  readonly index = new FreeRunIndex();
  readonly arenas = new Set<Arena>();
  readonly pools: SizeClassPool[];
  readonly #host: HeapHost;
  /** Sum of the arenas' sizes. */
  arenaBytes = 0;
  largeLive = 0;
  largeInUseBytes = 0;
  largeAllocatedBytes = 0;
  #took: Arena | undefined = undefined;

  constructor(policy: AccessPolicy, flags: number, host: HeapHost) {
    this.policy = policy;
    this.flags = flags;
    this.#host = host;
    this.pools = SIZE_CLASSES.map((_, i) => new SizeClassPool(i));
  }

  addArena(arena: Arena): void {
    this.arenas.add(arena);
    arena.init(this.index);
    this.arenaBytes += arena.byteLength;
  }

  /** Takes an arena without live blocks out of the heap (its slabs must all be empty). */
  removeArena(arena: Arena): void {
    for (const slab of arena.slabs) {
      slab.pool.slabs--;
      if (slab.partialPos >= 0) slab.pool.removePartial(slab);
    }
    arena.slabs.clear();
    arena.unfile(this.index);
    this.arenas.delete(arena);
    this.arenaBytes -= arena.byteLength;
    arena.retired = true;
  }

  /** Bytes of the heap's arenas not carved into slabs or large blocks. */
  freeBytes(): number {
    let free = 0;
    for (const arena of this.arenas) free += (arena.pages - arena.usedPages) * PAGE_BYTES;
    return free;
  }

  allocSmall(n: number, stack: string | undefined): Block {
    const pool = this.pools[sizeClassIndex(n)] as SizeClassPool;
    // Never read partial[-1]: one negative index turns this load megamorphic for good.
    const last = pool.partial.length - 1;
    const slab = last >= 0 ? (pool.partial[last] as Slab) : this.#newSlab(pool);
    const slot = slab.freeSlots[slab.freeCount - 1] as number;
    const offset = slab.offset + slot * pool.size;
    const arena = slab.arena;
    if (this.#host.debug) this.#checkPoison(arena, offset, pool.size);
    slab.freeCount--;
    if (slab.freeCount === 0) pool.removePartial(slab);
    const block = new Block(
      this.#host.owner,
      arena,
      BlockKind.Small,
      slab,
      slot,
      offset,
      n,
      pool.size,
      stack,
    );
    slab.owners[slot] = block;
    arena.liveBlocks++;
    pool.liveBlocks++;
    pool.inUseBytes += n;
    return block;
  }

  /** Returns false (changing nothing) when the slot does not hold `block`. */
  releaseSmall(block: Block, slab: Slab, slot: number): boolean {
    if (slab.arena.retired || slab.owners[slot] !== block) return false;
    slab.owners[slot] = undefined;
    const pool = slab.pool;
    const arena = slab.arena;
    if (this.#host.debug) poison(arena.bytes, slab.offset + slot * pool.size, pool.size);
    slab.freeSlots[slab.freeCount++] = slot;
    if (slab.freeCount === 1) pool.addPartial(slab);
    pool.liveBlocks--;
    pool.inUseBytes -= block.length;
    arena.liveBlocks--;
    // Keep one slab with free slots per class, so alloc/release of one block does not
    // carve and give back a slab each time.
    if (slab.freeCount === pool.slabCapacity && pool.partial.length > 1) this.#freeSlab(slab);
    return true;
  }

  allocLarge(n: number, stack: string | undefined): Block {
    // n ≤ maxArenaBytes ≤ 2 GiB: integer ops, where Math.ceil(n / PAGE_BYTES) goes through doubles.
    const pages = (n + PAGE_BYTES - 1) >>> PAGE_SHIFT;
    const start = this.#take(pages);
    const arena = this.#took as Arena;
    const offset = start * PAGE_BYTES;
    const capacity = pages * PAGE_BYTES;
    if (this.#host.debug) {
      const bad = findUnpoisoned(arena.bytes, offset, capacity);
      if (bad >= 0) {
        poison(arena.bytes, offset, capacity);
        this.#give(arena, start, pages);
        this.#host.corrupted(arena, bad);
      }
    }
    const block = new Block(
      this.#host.owner,
      arena,
      BlockKind.Large,
      arena,
      start,
      offset,
      n,
      capacity,
      stack,
    );
    arena.large[start] = block;
    arena.largeBlocks++;
    arena.liveBlocks++;
    this.largeLive++;
    this.largeInUseBytes += n;
    this.largeAllocatedBytes += capacity;
    return block;
  }

  /** Returns false (changing nothing) when no large block of `arena` starts at `start`. */
  releaseLarge(block: Block, arena: Arena, start: number): boolean {
    if (arena.retired || arena.large[start] !== block) return false;
    arena.large[start] = undefined;
    arena.largeBlocks--;
    const capacity = block.capacity;
    if (this.#host.debug) poison(arena.bytes, start * PAGE_BYTES, capacity);
    arena.liveBlocks--;
    this.largeLive--;
    this.largeInUseBytes -= block.length;
    this.largeAllocatedBytes -= capacity;
    this.#give(arena, start, capacity >>> PAGE_SHIFT);
    return true;
  }

  /** Gives every empty slab back to its arena. */
  trimSlabs(): void {
    for (const pool of this.pools) {
      for (const slab of [...pool.partial]) {
        if (slab.freeCount === pool.slabCapacity) this.#freeSlab(slab);
      }
    }
  }

  /** Every live block of the heap (leak reports, destroy). */
  *liveBlocks(): Generator<Block> {
    for (const arena of this.arenas) {
      for (const slab of arena.slabs) {
        for (const b of slab.owners) if (b !== undefined) yield b;
      }
      for (const b of arena.large) if (b !== undefined) yield b;
    }
  }

  #newSlab(pool: SizeClassPool): Slab {
    const start = this.#take(pool.slabPages);
    const arena = this.#took as Arena;
    const slab = new Slab(arena, pool, start);
    arena.slabs.add(slab);
    pool.slabs++;
    pool.addPartial(slab);
    return slab;
  }

  #freeSlab(slab: Slab): void {
    const pool = slab.pool;
    pool.removePartial(slab);
    slab.arena.slabs.delete(slab);
    pool.slabs--;
    this.#give(slab.arena, slab.startPage, pool.slabPages);
  }

  #take(pages: number): number {
    let run = this.index.findBest(pages);
    if (run === undefined) {
      this.#host.grow(this, pages);
      run = this.index.findBest(pages);
      if (run === undefined) throw new Error(`internal: no run of ${pages} pages after growing`);
    }
    const arena = run.arena;
    this.#took = arena;
    return arena.carve(this.index, run, pages);
  }

  #give(arena: Arena, start: number, pages: number): void {
    arena.free(this.index, start, pages);
    if (arena.usedPages === 0) this.#host.arenaEmptied(this, arena);
  }

  #checkPoison(arena: Arena, offset: number, length: number): void {
    const bad = findUnpoisoned(arena.bytes, offset, length);
    if (bad < 0) return;
    poison(arena.bytes, offset, length);
    this.#host.corrupted(arena, bad);
  }
}

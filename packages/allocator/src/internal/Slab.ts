import type { Arena } from '../Arena.js';
import type { Block } from '../Block.js';
import { PAGE_BYTES, SIZE_CLASSES, slabPages } from './SizeClasses.js';

/** Bookkeeping of one size class within one heap. */
export class SizeClassPool {
  readonly index: number;
  readonly size: number;
  readonly slabPages: number;
  readonly slabCapacity: number;
  /** Slabs with at least one free slot; the last one is allocated from first. */
  readonly partial: Slab[] = [];
  slabs = 0;
  liveBlocks = 0;
  inUseBytes = 0;

  constructor(index: number) {
    this.index = index;
    this.size = SIZE_CLASSES[index] as number;
    this.slabPages = slabPages(this.size);
    this.slabCapacity = Math.floor((this.slabPages * PAGE_BYTES) / this.size);
  }

  addPartial(slab: Slab): void {
    slab.partialPos = this.partial.length;
    this.partial.push(slab);
  }

  removePartial(slab: Slab): void {
    const last = this.partial.pop() as Slab;
    if (last !== slab) {
      this.partial[slab.partialPos] = last;
      last.partialPos = slab.partialPos;
    }
    slab.partialPos = -1;
  }
}

/**
 * A run of pages of an arena cut into equal slots of one size class. Free slots are a
 * stack (O(1) both ways); `owners` maps live slots to their blocks, which is how release
 * checks a block really is the one the slot holds, and how leak reports find live blocks.
 */
export class Slab {
  readonly arena: Arena;
  readonly pool: SizeClassPool;
  readonly startPage: number;
  /** Byte offset of slot 0 in the arena. */
  readonly offset: number;
  readonly freeSlots: Int32Array;
  freeCount: number;
  readonly owners: (Block | undefined)[];
  partialPos = -1;

  constructor(arena: Arena, pool: SizeClassPool, startPage: number) {
    this.arena = arena;
    this.pool = pool;
    this.startPage = startPage;
    this.offset = startPage * PAGE_BYTES;
    const n = pool.slabCapacity;
    this.freeSlots = new Int32Array(n);
    // Popped from the end: slot 0 first, so a fresh slab fills in address order.
    for (let i = 0; i < n; i++) this.freeSlots[i] = n - 1 - i;
    this.freeCount = n;
    this.owners = new Array(n).fill(undefined);
  }
}

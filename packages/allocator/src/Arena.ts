import { type AccessPolicy, policyIndex } from './AccessPolicy.js';
import type { Block } from './Block.js';
import type { FreeRun, FreeRunIndex } from './internal/FreeRunIndex.js';
import { PAGE_BYTES } from './internal/SizeClasses.js';
import type { Slab } from './internal/Slab.js';
import type { Region } from './Registrar.js';

/** Occupancy of one arena, as `stats().arenas` reports it. */
export interface ArenaStats {
  readonly id: number;
  readonly access: AccessPolicy;
  readonly addr: number;
  readonly bytes: number;
  /** Bytes handed out as slabs or large blocks (whole pages). */
  readonly usedBytes: number;
  /** usedBytes / bytes. */
  readonly occupancy: number;
  /** Live blocks in the arena (small and large). */
  readonly liveBlocks: number;
  readonly slabs: number;
  readonly largeBlocks: number;
  /** Bytes in free runs (bytes − usedBytes when the books are straight). */
  readonly freeBytes: number;
  /** Free runs (maximal stretches of free pages) and the largest one, in bytes. */
  readonly freeRuns: number;
  readonly largestFreeRun: number;
  /** Reserved with `reserve()`: kept registered even when empty. */
  readonly pinned: boolean;
}

/**
 * One registered region, registered once and carved into whole pages: slabs of small
 * blocks and large blocks. Free pages form maximal runs, found through boundary tags
 * (`runAtStart` / `runAtEnd`) and merged with their neighbours when pages come back.
 * The heap files the runs in its FreeRunIndex.
 */
export class Arena {
  readonly id: number;
  readonly access: AccessPolicy;
  /** Index of `access` in ACCESS_POLICIES: finds the heap on release without a string switch. */
  readonly policyIndex: number;
  readonly flags: number;
  readonly region: Region;
  readonly bytes: Uint8Array;
  readonly addr: number;
  readonly lkey: number;
  readonly rkey: number;
  readonly pages: number;
  usedPages = 0;
  liveBlocks = 0;
  pinned = false;
  retired = false;
  /** When it last became empty (the allocator's counter): the oldest empty arena goes first. */
  emptiedSeq = 0;
  /** Slabs carved from this arena. */
  readonly slabs = new Set<Slab>();
  /**
   * Large blocks, indexed by first page. Not a Map: set/delete on every large alloc and
   * release cost about as much as the whole rest of the large path.
   */
  readonly large: (Block | undefined)[];
  largeBlocks = 0;
  readonly #runAtStart: (FreeRun | undefined)[];
  readonly #runAtEnd: (FreeRun | undefined)[];

  constructor(id: number, access: AccessPolicy, flags: number, region: Region, pages: number) {
    this.id = id;
    this.access = access;
    this.policyIndex = policyIndex(access);
    this.flags = flags;
    this.region = region;
    this.bytes = region.bytes;
    this.addr = region.addr;
    this.lkey = region.lkey;
    this.rkey = region.rkey;
    this.pages = pages;
    this.large = new Array(pages).fill(undefined);
    this.#runAtStart = new Array(pages).fill(undefined);
    this.#runAtEnd = new Array(pages).fill(undefined);
  }

  get byteLength(): number {
    return this.pages * PAGE_BYTES;
  }

  /** Files the whole arena as one free run (a new arena). */
  init(index: FreeRunIndex): FreeRun {
    const run = index.make(this);
    run.start = 0;
    run.pages = this.pages;
    this.#tag(run);
    index.insert(run);
    return run;
  }

  /** Takes `pages` pages from the start of `run` (which has at least that many). Returns the first page. */
  carve(index: FreeRunIndex, run: FreeRun, pages: number): number {
    const start = run.start;
    this.#runAtStart[start] = undefined;
    if (run.pages > pages) {
      run.start += pages;
      run.pages -= pages;
      this.#runAtStart[run.start] = run;
      index.resized(run);
    } else {
      this.#runAtEnd[start + run.pages - 1] = undefined;
      index.remove(run);
      index.recycle(run);
    }
    this.usedPages += pages;
    return start;
  }

  /**
   * Gives pages [start, start + pages) back, merged with free neighbours. The run that
   * grows keeps its object and is refiled only when it changes bin.
   */
  free(index: FreeRunIndex, start: number, pages: number): void {
    const end = start + pages;
    const left = start > 0 ? this.#runAtEnd[start - 1] : undefined;
    const right = end < this.pages ? this.#runAtStart[end] : undefined;
    this.usedPages -= pages;
    let run: FreeRun;
    if (left !== undefined) {
      this.#runAtEnd[start - 1] = undefined;
      run = left;
      run.pages += pages;
      if (right !== undefined) {
        this.#runAtStart[end] = undefined;
        run.pages += right.pages;
        index.remove(right);
        index.recycle(right);
      }
    } else if (right !== undefined) {
      this.#runAtStart[end] = undefined;
      run = right;
      run.start = start;
      run.pages += pages;
    } else {
      run = index.make(this);
      run.start = start;
      run.pages = pages;
      this.#tag(run);
      index.insert(run);
      return;
    }
    this.#tag(run);
    index.resized(run);
  }

  /** Removes every free run of this arena from the index (the arena is being retired). */
  unfile(index: FreeRunIndex): void {
    for (let p = 0; p < this.pages; p++) {
      const run = this.#runAtStart[p];
      if (run === undefined) continue;
      index.remove(run);
      this.#runAtStart[p] = undefined;
      this.#runAtEnd[run.start + run.pages - 1] = undefined;
      index.recycle(run);
      p = run.start + run.pages - 1;
    }
  }

  /** Free runs of this arena, in address order: [start, pages] pairs (stats and checks). */
  freeRuns(): Array<readonly [number, number]> {
    const out: Array<readonly [number, number]> = [];
    for (let p = 0; p < this.pages; p++) {
      const run = this.#runAtStart[p];
      if (run === undefined) continue;
      out.push([run.start, run.pages]);
      p = run.start + run.pages - 1;
    }
    return out;
  }

  stats(): ArenaStats {
    const runs = this.freeRuns();
    let largest = 0;
    let free = 0;
    for (const [, pages] of runs) {
      largest = Math.max(largest, pages);
      free += pages;
    }
    return {
      id: this.id,
      access: this.access,
      addr: this.addr,
      bytes: this.byteLength,
      usedBytes: this.usedPages * PAGE_BYTES,
      occupancy: this.usedPages / this.pages,
      liveBlocks: this.liveBlocks,
      freeBytes: free * PAGE_BYTES,
      slabs: this.slabs.size,
      largeBlocks: this.largeBlocks,
      freeRuns: runs.length,
      largestFreeRun: largest * PAGE_BYTES,
      pinned: this.pinned,
    };
  }

  #tag(run: FreeRun): void {
    this.#runAtStart[run.start] = run;
    this.#runAtEnd[run.start + run.pages - 1] = run;
  }
}

import type { Arena } from '../Arena.js';

/** A maximal run of free pages in one arena. Internal objects, recycled. */
export class FreeRun {
  arena: Arena;
  start = 0;
  pages = 0;
  /** Bin it is filed in, and its position there (-1 when not filed). */
  bin = -1;
  pos = -1;

  constructor(arena: Arena) {
    this.arena = arena;
  }
}

// Two-level segregated bins (as in TLSF): runs of 1..15 pages have a bin each; above that,
// 8 bins per power of two, so a bin spans at most 12.5 % in size. Runs are below 2^31 pages.
const EXACT = 16;
const SUB = 8;
const MAX_FL = 30;
const BINS = EXACT + (MAX_FL - 4 + 1) * SUB;

function binOf(pages: number): number {
  if (pages < EXACT) return pages;
  const fl = 31 - Math.clz32(pages);
  const sl = (pages >>> (fl - 3)) & (SUB - 1);
  return EXACT + (fl - 4) * SUB + sl;
}

/** True when run `a` is a better choice than `b`: smaller, else lower arena, else lower address. */
function better(a: FreeRun, b: FreeRun): boolean {
  if (a.pages !== b.pages) return a.pages < b.pages;
  if (a.arena.id !== b.arena.id) return a.arena.id < b.arena.id;
  return a.start < b.start;
}

/**
 * Free runs of every arena of one heap, filed by size. `findBest` is best fit with
 * address-ordered tie-breaking (the policy with the least fragmentation in Wilson et al.'s
 * survey): it looks at the bin of the request and then at the first non-empty larger bin,
 * found through a bitmap.
 */
export class FreeRunIndex {
  readonly #bins: FreeRun[][] = Array.from({ length: BINS }, () => []);
  readonly #bitmap = new Uint32Array(Math.ceil(BINS / 32));
  readonly #spare: FreeRun[] = [];

  /** A run object for `arena`, recycled when possible. */
  make(arena: Arena): FreeRun {
    const run = this.#spare.pop();
    if (run === undefined) return new FreeRun(arena);
    run.arena = arena;
    return run;
  }

  /** Gives a run object back for reuse (it must not be filed). */
  recycle(run: FreeRun): void {
    if (this.#spare.length < 1024) this.#spare.push(run);
  }

  insert(run: FreeRun): void {
    const bin = binOf(run.pages);
    const list = this.#bins[bin] as FreeRun[];
    run.bin = bin;
    run.pos = list.length;
    list.push(run);
    this.#bitmap[bin >>> 5] = (this.#bitmap[bin >>> 5] as number) | (1 << (bin & 31));
  }

  remove(run: FreeRun): void {
    const list = this.#bins[run.bin] as FreeRun[];
    const last = list.pop() as FreeRun;
    if (last !== run) {
      list[run.pos] = last;
      last.pos = run.pos;
    }
    if (list.length === 0) {
      const w = run.bin >>> 5;
      this.#bitmap[w] = (this.#bitmap[w] as number) & ~(1 << (run.bin & 31));
    }
    run.bin = -1;
    run.pos = -1;
  }

  /** Refiles `run` after its size changed, when it no longer belongs in its bin. */
  resized(run: FreeRun): void {
    if (binOf(run.pages) === run.bin) return;
    this.remove(run);
    this.insert(run);
  }

  /** The best run of at least `pages` pages, or undefined. */
  findBest(pages: number): FreeRun | undefined {
    const first = binOf(pages);
    let best: FreeRun | undefined;
    for (const run of this.#bins[first] as FreeRun[]) {
      if (run.pages >= pages && (best === undefined || better(run, best))) best = run;
    }
    if (best !== undefined) return best;
    const bin = this.#nextNonEmpty(first + 1);
    if (bin < 0) return undefined;
    for (const run of this.#bins[bin] as FreeRun[]) {
      if (best === undefined || better(run, best)) best = run;
    }
    return best;
  }

  #nextNonEmpty(from: number): number {
    if (from >= BINS) return -1;
    let w = from >>> 5;
    let word = (this.#bitmap[w] as number) & (~0 << (from & 31));
    while (word === 0) {
      w++;
      if (w >= this.#bitmap.length) return -1;
      word = this.#bitmap[w] as number;
    }
    return (w << 5) + (31 - Math.clz32(word & -word));
  }
}

/**
 * Size classes of small blocks, and the page granularity of large ones.
 *
 * Small requests (up to SMALL_MAX_BYTES) are rounded up to a class: multiples of 16 up to
 * 128 bytes, then four classes per power of two (160, 192, 224, 256, 320, …, 32 KiB), so a
 * block of 64 bytes or more wastes at most 25 % (less than 12.5 % on average) and every block
 * is 16-byte aligned. Each class carves its blocks from slabs of at least 64 KiB and at
 * least 8 blocks. Larger requests are rounded up to whole pages (PAGE_BYTES), at most
 * 12.5 % for the smallest of them and nothing measurable for megabyte blocks.
 */

/** Granularity of arena space: slabs and large blocks are whole pages, page-aligned. */
export const PAGE_BYTES = 4096;
/** log2(PAGE_BYTES). */
export const PAGE_SHIFT = 12;
/** Largest request served from a size class; anything larger is a large block. */
export const SMALL_MAX_BYTES = 32 * 1024;
/** Smallest slab a class carves blocks from. */
export const MIN_SLAB_BYTES = 64 * 1024;
/** A slab holds at least this many blocks. */
export const MIN_SLAB_BLOCKS = 8;

function buildClasses(): readonly number[] {
  const sizes: number[] = [];
  for (let s = 16; s <= 128; s += 16) sizes.push(s);
  for (let base = 128; base < SMALL_MAX_BYTES; base *= 2) {
    const step = base / 4;
    for (let k = 1; k <= 4; k++) sizes.push(base + k * step);
  }
  return Object.freeze(sizes);
}

/** Byte size of every class, ascending; index = class index. */
export const SIZE_CLASSES: readonly number[] = buildClasses();

/** Class index per 16-byte granule: every class is a multiple of 16, so the granule decides. */
const CLASS_OF_GRANULE: Uint8Array = (() => {
  const table = new Uint8Array(SMALL_MAX_BYTES / 16 + 1);
  let c = 0;
  for (let g = 1; g < table.length; g++) {
    while ((SIZE_CLASSES[c] as number) < g * 16) c++;
    table[g] = c;
  }
  return table;
})();

/** Index of the smallest class holding `n` bytes (1 ≤ n ≤ SMALL_MAX_BYTES; not checked). */
export function sizeClassIndex(n: number): number {
  return CLASS_OF_GRANULE[(n + 15) >> 4] as number;
}

/** Pages of one slab of a class of `size` bytes. */
export function slabPages(size: number): number {
  return Math.ceil(Math.max(MIN_SLAB_BYTES, size * MIN_SLAB_BLOCKS) / PAGE_BYTES);
}

/** Bytes a request of `n` actually occupies: its class size, or whole pages when large. */
export function blockCapacity(n: number): number {
  if (n <= SMALL_MAX_BYTES) return SIZE_CLASSES[sizeClassIndex(n)] as number;
  return Math.ceil(n / PAGE_BYTES) * PAGE_BYTES;
}

/** The largest slab of any class: an arena must be at least this large. */
export const MAX_SLAB_BYTES = slabPages(SMALL_MAX_BYTES) * PAGE_BYTES;

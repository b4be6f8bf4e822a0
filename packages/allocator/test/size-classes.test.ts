import { describe, expect, it } from 'vitest';
import {
  blockCapacity,
  MAX_SLAB_BYTES,
  PAGE_BYTES,
  SIZE_CLASSES,
  SMALL_MAX_BYTES,
  sizeClassIndex,
  slabPages,
} from '../src/internal/SizeClasses.js';

describe('size classes', () => {
  it('maps every small size to the smallest class that holds it', () => {
    const wrong: number[] = [];
    for (let n = 1; n <= SMALL_MAX_BYTES; n++) {
      const i = sizeClassIndex(n);
      const fits = (SIZE_CLASSES[i] ?? 0) >= n;
      const smallest = i === 0 || (SIZE_CLASSES[i - 1] as number) < n;
      if (!fits || !smallest) wrong.push(n);
    }
    expect(wrong).toEqual([]);
  });

  it('wastes at most 25 % for requests of 64 bytes and more, and keeps 16-byte alignment', () => {
    let worst = 0;
    for (let n = 64; n <= SMALL_MAX_BYTES; n++) worst = Math.max(worst, blockCapacity(n) / n);
    expect(worst).toBeLessThanOrEqual(1.25);
    for (const size of SIZE_CLASSES) expect(size % 16).toBe(0);
    expect(SIZE_CLASSES.at(-1)).toBe(SMALL_MAX_BYTES);
    expect([...SIZE_CLASSES].sort((x, y) => x - y)).toEqual(SIZE_CLASSES);
  });

  it('rounds large requests to whole pages: at most 12.5 % for the smallest of them', () => {
    expect(blockCapacity(SMALL_MAX_BYTES + 1)).toBe(SMALL_MAX_BYTES + PAGE_BYTES);
    for (const n of [SMALL_MAX_BYTES + 1, 65_537, 1_000_000, 4 * 1024 * 1024 - 1]) {
      const cap = blockCapacity(n);
      expect(cap % PAGE_BYTES).toBe(0);
      expect(cap).toBeGreaterThanOrEqual(n);
      expect(cap - n).toBeLessThan(PAGE_BYTES);
      expect(cap / n).toBeLessThanOrEqual(1.125);
    }
  });

  it('gives each class slabs of whole pages holding at least 8 blocks, none above MAX_SLAB_BYTES', () => {
    for (const size of SIZE_CLASSES) {
      const bytes = slabPages(size) * PAGE_BYTES;
      expect(Math.floor(bytes / size)).toBeGreaterThanOrEqual(8);
      expect(bytes).toBeGreaterThanOrEqual(64 * 1024);
      expect(bytes).toBeLessThanOrEqual(MAX_SLAB_BYTES);
    }
  });
});

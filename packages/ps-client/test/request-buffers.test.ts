import { expect, it } from 'vitest';
import { RequestBuffers } from '../src/internal/RequestBuffers.js';

it('RequestBuffers: a given-back buffer serves the next request of its size class, 8-aligned and exact', () => {
  const pool = new RequestBuffers();
  const a = pool.take(22_000);
  expect(a.length).toBe(22_000);
  expect(a.byteOffset).toBe(0);
  pool.give(a);
  const b = pool.take(20_000); // same power-of-two class (32 KiB)
  expect(b.buffer).toBe(a.buffer);
  expect(b.length).toBe(20_000);
  const c = pool.take(20_000); // the class is empty again: a new buffer
  expect(c.buffer).not.toBe(a.buffer);
  pool.give(b);
  expect(pool.take(40_000).buffer).not.toBe(a.buffer); // another class
});

it('RequestBuffers: foreign or oversized buffers are never kept, and the free lists are bounded', () => {
  const pool = new RequestBuffers();
  const foreign = new Uint8Array(1000);
  pool.give(foreign);
  expect(pool.take(1000).buffer).not.toBe(foreign.buffer);
  const big = pool.take(8 << 20); // beyond the largest class: a plain buffer
  expect(big.length).toBe(8 << 20);
  pool.give(big);
  expect(pool.take(8 << 20).buffer).not.toBe(big.buffer);
  // 16 MiB of free 4 MiB buffers at most: the fifth given back is dropped.
  const held = Array.from({ length: 5 }, () => pool.take(4 << 20));
  for (const h of held) pool.give(h);
  const again = new Set(Array.from({ length: 5 }, () => pool.take(4 << 20).buffer));
  expect(held.filter((h) => again.has(h.buffer)).length).toBe(4);
});

import { expect } from 'vitest';
import {
  AllocError,
  type AllocErrorCode,
  RegisteredAllocator,
  type RegisteredAllocatorOptions,
} from '../src/index.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';

export const KiB = 1024;
export const MiB = 1024 * 1024;

/** Asserts `fn` throws an AllocError with `code`; returns it. */
export function expectCode(fn: () => unknown, code: AllocErrorCode): AllocError {
  let thrown: unknown;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(AllocError);
  expect((thrown as AllocError).code).toBe(code);
  return thrown as AllocError;
}

/** An allocator over a fresh FakeRegistrar (small arenas by default, so tests grow them). */
export function setup(options: Partial<RegisteredAllocatorOptions> = {}): {
  a: RegisteredAllocator;
  reg: FakeRegistrar;
} {
  const reg = new FakeRegistrar();
  const a = new RegisteredAllocator({
    arenaBytes: 1 * MiB,
    ...options,
    registrar: options.registrar ?? reg,
  });
  return { a, reg };
}

/** Deterministic PRNG (mulberry32), for seeded size mixes. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A log-uniform size in [64 B, 4 MiB]: the variable message mix of the issue. */
export function mixSize(random: () => number): number {
  return Math.round(64 * 2 ** (random() * 16));
}

import { describe, expect, it } from 'vitest';
import { type Block, RegisteredAllocator } from '../src/index.js';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { MiB, mixSize, rng } from './helpers.js';

// The target: ≤ 1.5× registered bytes per requested byte for a 64 B – 4 MiB mix.
// Memory, not speed: this asserts what is registered, never how long anything took.
describe('memory overhead under a 64 B – 4 MiB message mix', () => {
  for (const seed of [1, 2, 3]) {
    it(`stays within 1.5× at peak, with registrations rare in steady state (seed ${seed})`, () => {
      const random = rng(seed);
      const reg = new FakeRegistrar();
      const a = new RegisteredAllocator({ registrar: reg, maxRegisteredBytes: 4096 * MiB });
      const live: Block[] = [];
      let inUse = 0;
      let peakInUse = 0;
      let peakRegistered = 0;
      const step = (b: Block) => {
        inUse += b.length;
        peakInUse = Math.max(peakInUse, inUse);
        peakRegistered = Math.max(peakRegistered, a.registeredBytes);
      };
      for (let i = 0; i < 256; i++) {
        const b = a.alloc(mixSize(random));
        live.push(b);
        step(b);
      }
      const warm = a.stats().registrations;
      const ops = 4000;
      for (let i = 0; i < ops; i++) {
        const j = Math.floor(random() * live.length);
        const old = live[j] as Block;
        inUse -= old.length;
        old.release();
        const b = a.alloc(mixSize(random));
        live[j] = b;
        step(b);
      }
      const s = a.stats();
      expect(s.inUseBytes).toBe(inUse);
      expect(a.inUseBytes).toBe(inUse);
      expect(a.liveBlocks).toBe(256);
      expect(peakRegistered / peakInUse).toBeLessThanOrEqual(1.5);
      expect(s.internalFragmentation).toBeLessThan(0.02); // size classes and pages waste little
      expect(s.registrations - warm).toBeLessThan(ops / 100); // < 1 % of alloc+free register
      for (const b of live) b.release();
      a.close();
      expect(reg.live.size).toBe(0);
    });
  }
});

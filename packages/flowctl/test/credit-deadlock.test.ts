import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { runBidirectional } from './sim/bidirectional.js';

describe('bidirectional traffic with minimal credits', () => {
  it('completes in every interleaving when both sides start with the fewest credits allowed', () => {
    // 3 = 1 reserved credit + the smallest return threshold (2)
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.array(fc.nat({ max: 7 }), { maxLength: 400 }),
        (messages, choices) => {
          const r = runBidirectional({ messages, credits: 3, reserve: true }, choices);
          expect(r.outcome).toBe('completed');
          expect(r.overruns).toBe(0);
          expect(r.minAvailable).toBeGreaterThanOrEqual(0);
          expect(r.conserved).toBe(true);
          // credit updates are bounded: no ping-pong of updates answering updates
          expect(r.updates).toBeLessThanOrEqual(2 * messages + 2);
        },
      ),
      { numRuns: 400 },
    );
  });

  it('completes for any credit count and threshold, never overrunning and never going negative', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 3, max: 12 }).chain((credits) =>
          fc.record({
            credits: fc.constant(credits),
            threshold: fc.integer({ min: 2, max: credits - 1 }),
            messages: fc.integer({ min: 1, max: 40 }),
          }),
        ),
        fc.array(fc.nat({ max: 7 }), { maxLength: 400 }),
        ({ credits, threshold, messages }, choices) => {
          const r = runBidirectional(
            { messages, credits, returnThreshold: threshold, reserve: true },
            choices,
          );
          expect(r.outcome).toBe('completed');
          expect(r.overruns).toBe(0);
          expect(r.minAvailable).toBeGreaterThanOrEqual(0);
          expect(r.conserved).toBe(true);
        },
      ),
      { numRuns: 400 },
    );
  });
});

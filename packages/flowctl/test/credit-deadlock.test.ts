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

  it('a receiver that holds buffers until more arrive (reassembly) gets its sender going again after the flush delay', () => {
    fc.assert(
      fc.property(
        // The application holds up to group - 1 buffers until more arrive, at most every
        // credit but the reserve and one: the sender must keep one data credit to go on.
        fc
          .integer({ min: 4, max: 12 })
          .chain((credits) =>
            fc.integer({ min: 2, max: credits - 1 }).map((threshold) => ({ credits, threshold })),
          )
          .chain(({ credits, threshold }) =>
            fc.record({
              credits: fc.constant(credits),
              threshold: fc.constant(threshold),
              group: fc.integer({ min: 2, max: credits - 1 }),
              messages: fc.integer({ min: 1, max: 40 }),
            }),
          ),
        fc.array(fc.nat({ max: 9 }), { maxLength: 600 }),
        ({ credits, threshold, group, messages }, choices) => {
          const r = runBidirectional(
            { messages, credits, returnThreshold: threshold, group, reserve: true },
            choices,
          );
          expect(r.outcome).toBe('completed');
          expect(r.overruns).toBe(0);
          expect(r.conserved).toBe(true);
          // the flush delay answers data releases only: no updates answering updates
          expect(r.updates).toBeLessThanOrEqual(2 * messages + 2);
        },
      ),
      { numRuns: 400 },
    );
  });

  it('ablation: without the flush delay, credits owed below the threshold strand a stalled sender', () => {
    // 6 credits, threshold 4, the receiver holds 2 until a third arrives: each side sends
    // 5 (the reserve keeps one back), gets 2 of them released back as owed (< 4), and waits.
    const r = runBidirectional(
      { messages: 8, credits: 6, returnThreshold: 4, group: 3, reserve: true, flush: false },
      [],
    );
    expect(r.outcome).toBe('deadlock');
    const fixed = runBidirectional(
      { messages: 8, credits: 6, returnThreshold: 4, group: 3, reserve: true },
      [],
    );
    expect(fixed.outcome).toBe('completed');
  });
});

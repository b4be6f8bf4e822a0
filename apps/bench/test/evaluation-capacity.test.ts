import { describe, expect, it } from 'vitest';
import { isPastCapacity } from '../src/scenarios/evaluation/inference.js';
import { OpenLoopLatency } from '../src/scenarios/evaluation/OpenLoopLatency.js';
import { runOpenLoop } from '../src/scenarios/evaluation/openLoop.js';

describe('coordinated-omission-corrected latency', () => {
  it('measures from the scheduled arrival: lag plus service time', () => {
    const r = new OpenLoopLatency();
    // Arrived at 10 ms, issued 3 ms late, done 7 ms after issue.
    r.issued(10, 13);
    r.completed(10, 13, 20);
    // Issued on time, 1 ms of service.
    r.issued(30, 30);
    r.completed(30, 30, 31);
    // Issued late, then failed: its lag counts, no latency.
    r.issued(40, 45);
    expect(r.lag.count).toBe(3);
    expect(r.service.count).toBe(2);
    expect(r.fromArrival.count).toBe(2);
    expect(r.service.summary().meanUs).toBeCloseTo(4000, 6);
    expect(r.fromArrival.summary().meanUs).toBeCloseTo(5500, 6);
    expect(r.lag.summary().meanUs).toBeCloseTo((3000 + 0 + 5000) / 3, 6);
  });

  it('an open loop whose client stalls shows the stall from arrival, not from issue', async () => {
    let first = true;
    const r = await runOpenLoop(
      async () => {
        if (first) {
          first = false;
          // Block the event loop: arrivals due meanwhile are issued late, all at once.
          const until = performance.now() + 50;
          while (performance.now() < until);
        }
        await new Promise((res) => setImmediate(res));
      },
      { rate: 1000, durationMs: 200, maxOutstanding: 1000, seed: 3 },
    );
    expect(r.fromArrival.count).toBe(r.completed);
    expect(r.latency.count).toBe(r.completed);
    // Every request's arrival-based latency is its issue-based one plus its lag ≥ 0.
    const co = r.fromArrival.summary();
    const issue = r.latency.summary();
    expect(co.meanUs).toBeGreaterThanOrEqual(issue.meanUs);
    expect(co.meanUs).toBeCloseTo(issue.meanUs + r.lag.summary().meanUs, -1);
    expect(co.p99Us).toBeGreaterThanOrEqual(issue.p99Us);
  });

  it('a fetch row is past capacity when it dropped arrivals or served well below the offer', () => {
    expect(isPastCapacity(400, 396, 0)).toBe(false);
    // Poisson counts of a short row vary by a few per cent: not a queue.
    expect(isPastCapacity(400, 350, 0)).toBe(false);
    expect(isPastCapacity(400, 9.4, 0)).toBe(true);
    expect(isPastCapacity(400, 400, 3)).toBe(true);
  });
});

import { describe, expect, it } from 'vitest';
import { searchCapacity } from '../src/scenarios/evaluation/capacity.js';
import { OpenLoopLatency } from '../src/scenarios/evaluation/OpenLoopLatency.js';
import { runOpenLoop } from '../src/scenarios/evaluation/openLoop.js';

const search = { startConcurrency: 16, maxConcurrency: 64, minGain: 0.1 };

describe('capacity search', () => {
  it('doubles the concurrency while it gains, and stops at the knee', async () => {
    // A service that saturates at 1000 req/s from 20 requests in flight.
    const seen: number[] = [];
    const c = await searchCapacity(async (n) => {
      seen.push(n);
      return Math.min(50 * n, 1000);
    }, search);
    // 16 → 800, 32 → 1000 (+25 %: go on), 64 → 1000 (nothing gained: stop).
    expect(seen).toEqual([16, 32, 64]);
    expect(c).toEqual({
      rps: 1000,
      concurrency: 32,
      probes: [
        { concurrency: 16, rps: 800 },
        { concurrency: 32, rps: 1000 },
        { concurrency: 64, rps: 1000 },
      ],
    });
  });

  it('keeps the best probe when more in flight only costs (a gRPC-like service)', async () => {
    const c = await searchCapacity(async (n) => (n === 16 ? 300 : 280), search);
    expect(c.rps).toBe(300);
    expect(c.concurrency).toBe(16);
    expect(c.probes).toHaveLength(2);
  });

  it('goes no higher than the maximum, and a gain below the threshold ends the search', async () => {
    const linear = await searchCapacity(async (n) => n * 10, search);
    expect(linear.probes.map((p) => p.concurrency)).toEqual([16, 32, 64]);
    expect(linear.rps).toBe(640);
    // +5 % is noise, not capacity: stop, but report the higher figure.
    const flat = await searchCapacity(async (n) => (n === 16 ? 1000 : 1050), search);
    expect(flat.probes.map((p) => p.concurrency)).toEqual([16, 32]);
    expect(flat.rps).toBe(1050);
    await expect(searchCapacity(async () => 1, { ...search, maxConcurrency: 8 })).rejects.toThrow(
      /bad options/,
    );
  });
});

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
});

// A ping-pong row measured in interleaved rounds reports its pooled samples: every round's
// latencies in one distribution, CPU and heap per round trip over all of them, and each
// round's p50 beside it (the spread a reader checks before trusting a ratio).
import { describe, expect, it } from 'vitest';
import type { Result } from '../src/report/Result.js';
import { roundSpread } from '../src/scenarios/verbs-pingpong.js';
import { LatencyRecorder } from '../src/stats/LatencyRecorder.js';
import { PooledRounds } from '../src/stats/PooledRounds.js';
import { floorSummary } from '../src/stats/wakeupFloor.js';

function round(samplesUs: number[], cpuUsPerOp: number, heapBytesPerOp: number, gcCount: number) {
  const rec = new LatencyRecorder();
  for (const us of samplesUs) rec.record(us);
  const row: Result = {
    transport: 'soft',
    op: 'send-pingpong-events',
    sizeBytes: 64,
    ...rec.summary(),
    cpuUsPerOp,
    heapBytesPerOp,
    gcCount,
  };
  return { row, rec };
}

function row(op: string, roundP50Us: number[]): Result {
  return {
    transport: 'tcp',
    op,
    sizeBytes: 64,
    p50Us: 1,
    meanUs: 1,
    p99Us: 1,
    cpuUsPerOp: 1,
    roundP50Us,
  };
}

describe('a row pooled from interleaved rounds', () => {
  it('pools every sample, weighs CPU and heap by round trips and keeps each round’s p50', () => {
    const pool = new PooledRounds();
    const a = round([10, 10, 10], 20, 0, 0);
    const b = round([30], 60, 8, 1);
    pool.add(a.row, a.rec);
    pool.add(b.row, b.rec);
    const r = pool.result();
    expect(r).toMatchObject({ transport: 'soft', op: 'send-pingpong-events', sizeBytes: 64 });
    expect(r.meanUs).toBeCloseTo(15);
    expect(r.p50Us).toBeCloseTo(10, 1);
    expect(r.p99Us).toBeCloseTo(30, 1);
    expect(r.cpuUsPerOp).toBeCloseTo((3 * 20 + 60) / 4);
    expect(r.heapBytesPerOp).toBeCloseTo(8 / 4);
    expect(r.gcCount).toBe(1);
    expect(r.rounds).toBe(2);
    expect((r.roundP50Us as number[]).map((x) => Math.round(x))).toEqual([10, 30]);
  });

  it('has no row without a round', () => {
    expect(() => new PooledRounds().result()).toThrow(/at least one round/);
  });

  it('gives the range of per-round ratios of two rows, round by round', () => {
    const link = row('link', [33, 90, 40]);
    const tcp = row('pingpong', [30, 45, 40]);
    expect(roundSpread(link, tcp)).toBe('; per round 1.00–2.00×');
    expect(roundSpread(link, row('pingpong', [30]))).toBe('');
  });
});

describe('the wake-up floor line', () => {
  it('names CPU and latency per round trip on two vCPUs, and on one when measured', () => {
    const floor = (op: string, cpu: number, p50: number): Result => ({
      transport: 'machine',
      op,
      sizeBytes: 0,
      p50Us: p50,
      meanUs: p50,
      p99Us: p50,
      cpuUsPerOp: cpu,
      placement: op === 'wakeup-floor' ? 'cross-vcpu' : 'same-vcpu',
    });
    const line = floorSummary([
      floor('wakeup-floor', 33, 46),
      floor('wakeup-floor-same-vcpu', 9, 8),
    ]);
    expect(line).toBe(
      "this machine's wake-up floor: 33.0 µs CPU / 46.0 µs per round trip between two threads on two vCPUs (9.0 µs / 8.0 µs when both share one vCPU); every event-driven round trip pays it at least once per side",
    );
    expect(floorSummary([])).toBe('');
  });
});

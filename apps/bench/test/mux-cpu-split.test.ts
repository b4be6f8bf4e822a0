// The same-load rows' CPU split: a part per second and a part per message, from two loads,
// and the wake-ups of both processes that the rows count.
import { describe, expect, it } from 'vitest';
import type { Result } from '../src/report/Result.js';
import { cpuSplit, cpuSplitLines } from '../src/scenarios/muxCpuModel.js';
import { bothWakeups, wakeups } from '../src/stats/loopWakeups.js';

/** A row whose CPU per second is `fixedMs` ms + `perMsgUs` µs per message at `rate`. */
function row(
  transport: Result['transport'],
  op: string,
  rate: number,
  fixedMs: number,
  perMsgUs: number,
  wakeupsPerMsg?: number,
): Result {
  const cpuUsPerOp = (fixedMs * 1000 + perMsgUs * rate) / rate;
  return {
    transport,
    op,
    sizeBytes: 64,
    p50Us: 100,
    meanUs: 100,
    p99Us: 100,
    cpuUsPerOp,
    cpuUsPerOpRounds: [cpuUsPerOp, cpuUsPerOp],
    offeredRps: rate,
    achievedRps: rate,
    ...(wakeupsPerMsg === undefined ? {} : { wakeupsPerMsg }),
  };
}

describe('mux same-load CPU split', () => {
  it('recovers the per-second and per-message parts from two loads', () => {
    const s = cpuSplit(row('tcp', 'x @25%', 20_000, 200, 2), row('tcp', 'x @50%', 40_000, 200, 2));
    expect(s?.fixedMsPerSec).toBeCloseTo(200, 6);
    expect(s?.marginalUs).toBeCloseTo(2, 6);
    expect(s?.marginalRoundsUs).toHaveLength(2);
    expect(s?.marginalRoundsUs[0]).toBeCloseTo(2, 6);
  });

  it('has nothing to say about a single load', () => {
    const r = row('tcp', 'x @25%', 20_000, 200, 2);
    expect(cpuSplit(r, r)).toBeUndefined();
  });

  it('writes one line per transport and policy, with the wake-ups per message', () => {
    const lines = cpuSplitLines([
      row('tcp', 'mux-open x16 @25%', 20_000, 230, 3, 0.1),
      row('soft', 'mux-open x16 @25% event', 20_000, 220, 2, 0.1),
      row('tcp', 'mux-open x16 @50%', 40_000, 230, 3, 0.05),
      row('soft', 'mux-open x16 @50% event', 40_000, 220, 2, 0.05),
    ]);
    expect(lines).toEqual([
      'tcp: CPU ≈ 230 ms/s + 3.0 µs per message (both processes; per-message part by round 3.0, 3.0), wake-ups per message 0.100 @20000/s, 0.050 @40000/s',
      'soft event: CPU ≈ 220 ms/s + 2.0 µs per message (both processes; per-message part by round 2.0, 2.0), wake-ups per message 0.100 @20000/s, 0.050 @40000/s',
    ]);
  });
});

describe('wake-ups of a process', () => {
  it('counts this process’s sleeps, which grow when it waits', async () => {
    const before = wakeups('self');
    if (before === undefined) return; // no /proc: the rows leave the column out
    await new Promise((r) => setTimeout(r, 20));
    expect(wakeups('self')).toBeGreaterThan(before);
    // Each read is a moment of its own: the sum lies between twice the reads around it.
    const first = wakeups('self') as number;
    const both = bothWakeups(process.pid) as number;
    expect(both).toBeGreaterThanOrEqual(2 * first);
    expect(both).toBeLessThanOrEqual(2 * (wakeups('self') as number));
  });

  it('is unknown for a process that does not exist', () => {
    expect(wakeups(2 ** 22 + 12345)).toBeUndefined();
    expect(bothWakeups(undefined)).toBeUndefined();
  });
});

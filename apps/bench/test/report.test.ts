import { describe, expect, it } from 'vitest';
import { baselineFor } from '../src/report/baselineRow.js';
import { formatSize, ratio } from '../src/report/format.js';
import type { Result } from '../src/report/Result.js';
import { renderTable } from '../src/report/table.js';
import { LatencyRecorder } from '../src/stats/LatencyRecorder.js';

const row = (
  transport: Result['transport'],
  op: string,
  p50Us: number,
  extra: Partial<Result> = {},
): Result => ({
  transport,
  op,
  sizeBytes: 64,
  p50Us,
  meanUs: p50Us,
  p99Us: p50Us,
  cpuUsPerOp: p50Us,
  ...extra,
});

describe('bench report', () => {
  it('computes percentiles and mean from recorded samples', () => {
    const r = new LatencyRecorder();
    for (let i = 1; i <= 100; i++) r.record(i);
    const s = r.summary();
    expect(s.p50Us).toBeCloseTo(50, 0);
    expect(s.p99Us).toBeCloseTo(99, 0);
    expect(s.meanUs).toBeCloseTo(50.5, 5);
    expect(r.count).toBe(100);
  });

  it('keeps sub-microsecond resolution', () => {
    const r = new LatencyRecorder();
    r.record(1.25);
    expect(r.summary().p50Us).toBeCloseTo(1.25, 2);
  });

  it('formats ratios and sizes', () => {
    expect(ratio(5, 50)).toBe('0.10×');
    expect(ratio(5, undefined)).toBe('—');
    expect(formatSize(64)).toBe('64 B');
    expect(formatSize(4096)).toBe('4 KiB');
    expect(formatSize(1 << 20)).toBe('1 MiB');
  });

  it('compares each RDMA row with the TCP row of the same size and kind', () => {
    const rows = [
      row('tcp', 'pingpong', 40),
      row('soft', 'send-pingpong', 4),
      row('tcp', 'throughput', 10, { gibPerSec: 2 }),
      row('soft', 'write-throughput', 1, { gibPerSec: 8 }),
    ];
    expect(baselineFor(rows[1] as Result, rows)).toBe(rows[0]);
    expect(baselineFor(rows[3] as Result, rows)).toBe(rows[2]);
    const table = renderTable(rows);
    expect(table).toContain('0.10×');
    expect(table).toContain('4.00×');
  });
});

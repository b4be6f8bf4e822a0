import { describe, expect, it } from 'vitest';
import { baselineFor } from '../src/report/baselineRow.js';
import { chartsFor } from '../src/report/charts.js';
import { formatSize, ratio } from '../src/report/format.js';
import { renderSvg } from '../src/report/html.js';
import type { Result } from '../src/report/Result.js';
import { renderTable } from '../src/report/table.js';
import { gcFields } from '../src/scenarios/evaluation/gcFields.js';
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

  it("shows every row's GCs: table columns, and charts stacked by process", async () => {
    const shards = [
      { process: 'shard e0', pid: 2, major: 6, minor: 1, pauseMs: 60 },
      { process: 'shard e1', pid: 3, major: 2, minor: 0, pauseMs: 20 },
    ];
    const rows = [
      row('tcp', 'fetch@50%', 40, {
        offeredRps: 400,
        ...gcFields({ pid: 1, major: 2, minor: 30, pauseMs: 20 }, shards, 2000),
      }),
      row('soft', 'fetch@50%', 20, {
        offeredRps: 400,
        ...gcFields({ pid: 4, major: 0, minor: 2, pauseMs: 1 }, [], 2000),
      }),
    ];
    const table = renderTable(rows);
    for (const h of ['full GCs', 'full GC/1k op', 'GC pause µs/op']) expect(table).toContain(h);
    // tcp: 10 full GCs, 5 per 1 000 requests, 100 ms of pause over 2 000 requests.
    expect(table).toMatch(/tcp .* 10 +5\.00 +50\.0$/m);
    const charts = chartsFor({ scenario: 'evaluation', machine: {} as never, results: rows });
    const major = charts.find((c) => c.id === 'gc-major');
    const pause = charts.find((c) => c.id === 'gc-pause');
    if (major === undefined || pause === undefined) throw new Error('no GC charts');
    const values = (major.spec as { data: { values: Record<string, unknown>[] } }).data.values;
    expect(values.filter((v) => v.row === 'tcp fetch@50%')).toEqual([
      { row: 'tcp fetch@50%', process: 'client', majorPer1k: 1, pauseUsPerOp: 10 },
      { row: 'tcp fetch@50%', process: 'shard e0', majorPer1k: 3, pauseUsPerOp: 30 },
      { row: 'tcp fetch@50%', process: 'shard e1', majorPer1k: 1, pauseUsPerOp: 10 },
    ]);
    const svg = await renderSvg(pause.spec);
    expect(svg).toContain('<svg');
    expect(svg).toContain('shard e1');
    // Rows without GC figures (other scenarios) get no GC chart.
    const plain = chartsFor({ scenario: 'x', machine: {} as never, results: [row('tcp', 'p', 1)] });
    expect(plain.some((c) => c.id.startsWith('gc-'))).toBe(false);
  });
});

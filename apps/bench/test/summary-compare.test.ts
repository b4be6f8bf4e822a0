import { describe, expect, it } from 'vitest';
import { parseReport, renderCompare } from '../src/report/compare.js';
import type { Report, Result } from '../src/report/Result.js';
import { summarize } from '../src/report/summary.js';

const row = (transport: Result['transport'], op: string, p50Us: number): Result => ({
  transport,
  op,
  sizeBytes: 64,
  p50Us,
  meanUs: p50Us,
  p99Us: 2 * p50Us,
  cpuUsPerOp: p50Us,
});

const report = (results: Result[]): Report => ({
  scenario: 'verbs-pingpong',
  machine: {
    provider: 'soft',
    hostname: 'h',
    cpuModel: 'c',
    cpuCount: 2,
    node: 'v20',
    platform: 'linux',
    kernel: 'k',
  },
  summary: summarize(results),
  results,
});

describe('summary', () => {
  it('keeps the headline keys null until the PS scenarios exist and ratios every RDMA row', () => {
    const s = summarize([row('tcp', 'pingpong', 100), row('soft', 'send-pingpong', 25)]);
    expect(s.fetchMeanRatio).toBeNull();
    expect(s.grpcFetchMeanRatio).toBeNull();
    expect(s.ratios).toEqual([
      {
        transport: 'soft',
        op: 'send-pingpong',
        sizeBytes: 64,
        p50Ratio: 0.25,
        meanRatio: 0.25,
        p99Ratio: 0.25,
        cpuRatio: 0.25,
      },
    ]);
  });
});

describe('--compare', () => {
  it('prints each row’s change and the rows only one run has', () => {
    const old = report([row('tcp', 'pingpong', 100), row('soft', 'write-pingpong', 10)]);
    const now = report([row('tcp', 'pingpong', 80), row('soft', 'send-pingpong', 20)]);
    const text = renderCompare(old, now);
    expect(text).toMatch(
      /tcp pingpong 64 B\s+80\.0\s+-20\.0 %\s+160\.0\s+-20\.0 %\s+80\.0\s+-20\.0 %/,
    );
    expect(text).toMatch(/soft send-pingpong 64 B\s+20\.0\s+new/);
    expect(text).toContain('only in the earlier run: soft/write-pingpong/64');
  });

  it('refuses a file that is not a report', () => {
    expect(() => parseReport('{', 'a.json')).toThrow(/a\.json: not JSON/);
    expect(() => parseReport('{"scenario":1}', 'b.json')).toThrow(/not an rdmajs-bench/);
    expect(parseReport(JSON.stringify(report([])), 'c.json').scenario).toBe('verbs-pingpong');
  });
});

// The verbs-pingpong summary names issue 10's link targets against TCP in the same run.
import { describe, expect, it } from 'vitest';
import type { Result } from '../src/report/Result.js';
import { linkVerdict } from '../src/scenarios/verbs-pingpong.js';

function row(
  transport: Result['transport'],
  op: string,
  sizeBytes: number,
  p50Us: number,
  gibPerSec?: number,
): Result {
  return {
    transport,
    op,
    sizeBytes,
    p50Us,
    meanUs: p50Us,
    p99Us: p50Us,
    cpuUsPerOp: 1,
    ...(gibPerSec === undefined ? {} : { gibPerSec }),
  };
}

describe('verbs-pingpong link verdict', () => {
  it('reports each link row against its TCP baseline, met or missed', () => {
    const text = linkVerdict([
      row('tcp', 'pingpong', 64, 30),
      row('soft', 'send-pingpong-events-default-spin-link-tcp', 64, 39),
      row('soft', 'send-pingpong-completion-event-link-tcp', 64, 33),
      row('tcp', 'throughput', 1 << 20, 1000, 1),
      row('soft', 'write-throughput-link-tcp', 1 << 20, 2000, 0.5),
    ]);
    expect(text).toContain(
      "64 B round trip p50 (awaiting waitForCompletion): 1.30× TCP's (target ≤ 1.2×: missed)",
    );
    expect(text).toContain(
      "64 B round trip p50 (from the 'completion' event): 1.10× TCP's (target ≤ 1.2×: met)",
    );
    expect(text).toContain('1 MiB throughput: 0.50× the raw TCP stream (target ≥ 0.8×: missed)');
  });

  it('says nothing of rows that were not run', () => {
    expect(linkVerdict([row('tcp', 'pingpong', 64, 30)])).toBe('');
  });
});

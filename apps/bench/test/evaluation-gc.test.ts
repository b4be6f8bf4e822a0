import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsShardSet } from '../src/peers/PsShardSet.js';
import { gcFields } from '../src/scenarios/evaluation/gcFields.js';
import { EVAL_SECRET, EVAL_TABLES } from '../src/scenarios/evaluation/PsTarget.js';
import { collectGarbage } from '../src/stats/collectGarbage.js';
import {
  addProcessGc,
  gcBetween,
  gcSince,
  isGcCounts,
  NO_GC,
  type ProcessGc,
} from '../src/stats/GcCounts.js';
import { GcTally } from '../src/stats/GcTally.js';

const p = (process: string, pid: number, major: number, minor: number, pauseMs: number) =>
  ({ process, pid, major, minor, pauseMs }) satisfies ProcessGc;

describe('GC counts of a process', () => {
  it('GcTally counts full and young-generation GCs of this process, with their pause', async () => {
    const tally = new GcTally().start();
    try {
      const before = tally.snapshot();
      // Short-lived garbage well beyond a young generation's size: scavenges.
      const ring: unknown[] = new Array(1024);
      for (let i = 0; i < 1_000_000; i++) ring[i & 1023] = { i, a: [i] };
      expect(ring.length).toBe(1024);
      collectGarbage(); // one full Mark-Compact at least
      const d = gcSince(await tally.settled(), before);
      expect(d.major).toBeGreaterThanOrEqual(1);
      expect(d.minor).toBeGreaterThanOrEqual(1);
      expect(d.pauseMs).toBeGreaterThan(0);
      expect(isGcCounts(d)).toBe(true);
    } finally {
      tally.stop();
    }
  });

  it('refuses malformed counts from another process', () => {
    expect(isGcCounts({ major: 1, minor: 2, pauseMs: 0.5 })).toBe(true);
    for (const bad of [
      null,
      'gc',
      { major: -1, minor: 0, pauseMs: 0 },
      { major: 1.5, minor: 0, pauseMs: 0 },
      { major: 0, minor: 0, pauseMs: Number.NaN },
      { major: 0, minor: 0, pauseMs: -1 },
      { major: 0, minor: 0 },
    ])
      expect(isGcCounts(bad), JSON.stringify(bad)).toBe(false);
  });

  it('a window counts each process by pid, only when both readings have it', () => {
    const before = [p('shard e0', 10, 5, 50, 40), p('shard e1', 11, 2, 20, 10)];
    // e0 went on; e1 was killed and restarted under a new pid; e2 missed the first reading.
    const after = [
      p('shard e0', 10, 7, 61, 55.5),
      p('shard e1', 12, 1, 3, 4),
      p('shard e2', 13, 90, 900, 800),
    ];
    expect(gcBetween(before, after)).toEqual([p('shard e0', 10, 2, 11, 15.5)]);
    // A counter that went backwards under the same pid is a restart too: counted from zero.
    expect(gcSince({ major: 1, minor: 1, pauseMs: 1 }, { major: 3, minor: 0, pauseMs: 0 })).toEqual(
      { major: 1, minor: 1, pauseMs: 1 },
    );
    // A row's rounds add up process by process.
    const row: ProcessGc[] = [];
    addProcessGc(row, [p('shard e0', 10, 1, 2, 3)]);
    addProcessGc(row, [p('shard e0', 10, 1, 1, 1), p('shard e1', 11, 0, 4, 2)]);
    expect(row).toEqual([p('shard e0', 10, 2, 3, 4), p('shard e1', 11, 0, 4, 2)]);
  });

  it("a row's GC fields: the client first, then every server, totals and per request", () => {
    const f = gcFields(
      { pid: 7, major: 1, minor: 10, pauseMs: 5 },
      [p('shard e0', 8, 3, 2, 15)],
      200,
    );
    expect(f.gc.map((g) => g.process)).toEqual(['client', 'shard e0']);
    expect(f).toMatchObject({
      gcOps: 200,
      gcMajor: 4,
      gcMinor: 12,
      gcPauseMs: 20,
      majorGcPerOp: 0.02,
      minorGcPerOp: 0.06,
      gcPauseUsPerOp: 100,
    });
    expect(gcFields({ pid: 7, ...NO_GC }, [], 0).majorGcPerOp).toBeNaN();
  });
});

describe('GC counts of a ps shard (rdmajs-ps-server, counted by the preloaded gc-report)', () => {
  let set: PsShardSet | undefined;
  beforeAll(async () => {
    set = await PsShardSet.start({
      shards: 2,
      tables: EVAL_TABLES,
      secret: EVAL_SECRET,
      transports: ['tcp'],
      provider: 'soft',
      idPrefix: 'gc-test-',
    });
  }, 120_000);
  afterAll(async () => {
    await set?.stop();
  });

  it('every shard reports its GCs since it started; a stopped one reports none and exits', async () => {
    const s = set as PsShardSet;
    const first = await s.gcCounts();
    expect(first.map((g) => g.process)).toEqual(['shard gc-test-0', 'shard gc-test-1']);
    expect(first.map((g) => g.pid)).toEqual(s.pids);
    for (const g of first) {
      expect(isGcCounts(g)).toBe(true);
      // Loading the CLI through tsx alone allocates far beyond a young generation.
      expect(g.minor).toBeGreaterThan(0);
      expect(g.pauseMs).toBeGreaterThan(0);
    }
    const again = await s.gcCounts();
    for (const [i, g] of again.entries()) {
      const f = first[i] as ProcessGc;
      expect(g.minor).toBeGreaterThanOrEqual(f.minor);
      expect(g.major).toBeGreaterThanOrEqual(f.major);
    }
    const shard = s.shards[1];
    await shard?.stop();
    // The IPC channel the bench keeps to it did not hold it up: it drained and exited 0.
    expect(shard?.proc.exitCode).toBe(0);
    expect(await shard?.gcCounts()).toBeUndefined();
    expect((await s.gcCounts()).map((g) => g.process)).toEqual(['shard gc-test-0']);
  }, 60_000);
});

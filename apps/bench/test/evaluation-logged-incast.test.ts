import { describe, expect, it } from 'vitest';
import { drawRequests } from '../src/scenarios/evaluation/inference.js';
import { LOGGED, runLoggedIncast } from '../src/scenarios/evaluation/loggedIncast.js';
import { pushBatches } from '../src/scenarios/evaluation/training.js';

describe('evaluation: the headline incast on shards that log every push', () => {
  it('runs TCP and RDMA on shards of their own with a data directory, rows compared among themselves', async () => {
    const training = {
      concurrency: [1],
      keysPerPush: 8,
      samples: 128,
      keySpace: 10_000,
      zipfExponent: 0.99,
    };
    const pools = {
      fetch: drawRequests(
        {
          loads: [],
          grpcLoads: {},
          durationMs: 1,
          probeMs: 1,
          requests: 4,
          keySpace: 10_000,
          zipfExponent: 0.99,
        },
        1,
      ),
      push: pushBatches(training),
    };
    const rows = await runLoggedIncast(
      { sides: ['tcp', 'rdma'], provider: 'soft', tuning: {}, shardArgs: [], pools, training },
      () => {},
    );
    expect(rows.map((r) => [r.transport, r.op])).toEqual([
      ['tcp', `push-incast×64 ${LOGGED}`],
      ['soft', `push-incast×64 ${LOGGED}`],
    ]);
    for (const r of rows) {
      expect(r).toMatchObject({ baselineOp: r.op, pushLog: 'group', failed: 0, concurrency: 64 });
      // Two bursts of 64 pushes, each GC of the client process and the three shards counted.
      expect(r.gcOps).toBe(128);
      // The CPU per push split into the client's part and the shards' part, which add up.
      const client = r.clientCpuUsPerOp as number;
      const shards = r.serverCpuUsPerOp as number;
      expect(client).toBeGreaterThan(0);
      expect(shards).toBeGreaterThan(0);
      expect(client + shards).toBeCloseTo(r.cpuUsPerOp, 6);
      // Wake-ups per push (Linux /proc: readable here), never negative.
      expect(r.clientWakeupsPerOp).toBeGreaterThanOrEqual(0);
      expect(r.serverWakeupsPerOp).toBeGreaterThanOrEqual(0);
      expect((r.gc as { process: string }[]).map((g) => g.process)).toEqual([
        'client',
        'shard log0',
        'shard log1',
        'shard log2',
      ]);
    }
  }, 180_000);
});

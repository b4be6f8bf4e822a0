import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcStoreServer, grpcServersGc } from '../src/baselines/grpc/GrpcStoreServer.js';
import { PsShardSet } from '../src/peers/PsShardSet.js';
import type { Transport } from '../src/report/Result.js';
import { type ClientPools, ClientProcess } from '../src/scenarios/evaluation/ClientProcess.js';
import type { ClientProcessArgs } from '../src/scenarios/evaluation/clientProtocol.js';
import { EVAL_SECRET, EVAL_TABLES } from '../src/scenarios/evaluation/PsTarget.js';
import { isGcCounts } from '../src/stats/GcCounts.js';
import { alive } from './fixtures/alive.js';

const keys = (n: number, from: number) =>
  BigUint64Array.from({ length: n }, (_, i) => BigInt(from + i + 1));
const pools: ClientPools = {
  fetch: [keys(1, 0), keys(16, 100), keys(64, 200)],
  push: [keys(8, 1000), keys(8, 2000)],
};

describe('evaluation client process (one target’s clients in their own process)', () => {
  let set: PsShardSet | undefined;
  let grpc: GrpcStoreServer | undefined;

  beforeAll(async () => {
    set = await PsShardSet.start({
      shards: 1,
      tables: EVAL_TABLES,
      secret: EVAL_SECRET,
      transports: ['tcp', 'rdma'],
      provider: 'soft',
      idPrefix: 'client-process-test-',
    });
    grpc = await GrpcStoreServer.start(EVAL_TABLES);
  }, 120_000);
  afterAll(async () => {
    await grpc?.close();
    await set?.stop();
  });

  const spawn = (target: 'tcp' | 'rdma' | 'grpc') => {
    const s = set as PsShardSet;
    const g = grpc as GrpcStoreServer;
    const args: ClientProcessArgs =
      target === 'grpc'
        ? { kind: 'grpc', ports: [g.port] }
        : {
            kind: 'rdmajs',
            side: target,
            provider: 'soft',
            servers: s.servers(target),
            options: {},
          };
    const transport: Transport = target === 'rdma' ? 'soft' : target;
    return ClientProcess.spawn(args, {
      transport,
      serverPids: () => (target === 'grpc' ? [g.pid] : s.pids),
      serverGc: () => (target === 'grpc' ? grpcServersGc([g]) : s.gcCounts()),
      pools,
    });
  };

  it.each(['tcp', 'rdma', 'grpc'] as const)(
    '%s: a fetch row and an incast row in two rounds each add up; a fresh row starts over',
    async (target) => {
      const c = await spawn(target);
      try {
        await c.warmUp(5, 5);
        expect(await c.capacity(2, 100)).toBeGreaterThan(0);
        const round = { rate: 200, durationMs: 100, maxOutstanding: 256, seed: 1 };
        const a = await c.fetch({ ...round, fresh: true });
        const b = await c.fetch({ ...round, seed: 2, fresh: false });
        expect(a.completed).toBeGreaterThan(0);
        expect(b.completed).toBeGreaterThan(a.completed);
        expect(b.failed).toBe(0);
        // The histograms hold every round's requests: each was issued, so each has a lag.
        expect(b.cpuUs).toBeGreaterThan(a.cpuUs);
        expect(b.seconds).toBeGreaterThan(a.seconds);
        expect(b.latency.meanUs).toBeGreaterThan(0);
        expect(b.fromArrival.meanUs).toBeGreaterThanOrEqual(b.latency.meanUs * 0.999);
        // RDMA fetches READ the shards' readable table one-sidedly: the shards may not run at
        // all in a round (their CPU is still counted: a number, perhaps 0); the incast rounds
        // below wake them on every target.
        if (target === 'rdma') expect(Number.isFinite(a.serversCpuUs)).toBe(true);
        else expect(a.serversCpuUs).toBeGreaterThan(0);
        // GCs over the round: the client process's own (the row's so far), each server's.
        expect(isGcCounts(a.gc) && isGcCounts(b.gc)).toBe(true);
        expect(b.gc.minor).toBeGreaterThanOrEqual(a.gc.minor);
        expect(b.gc.pauseMs).toBeGreaterThanOrEqual(a.gc.pauseMs);
        expect(a.serversGc.map((g) => g.process)).toEqual([
          target === 'grpc' ? 'grpc server 0' : 'shard client-process-test-0',
        ]);
        expect(a.serversGc.every(isGcCounts)).toBe(true);
        expect(a.rssBytes).toBeGreaterThan(0);
        const fresh = await c.fetch({ ...round, seed: 3, fresh: true });
        expect(fresh.completed).toBeLessThan(b.completed);

        const burst = { concurrency: 4, bursts: 2, gapMs: 1 };
        const i1 = await c.incast({ ...burst, firstBurst: 0, fresh: true }, 1000);
        const i2 = await c.incast({ ...burst, firstBurst: 2, fresh: false }, 1000);
        expect(i1.count).toBe(8);
        expect(i2.count).toBe(16);
        expect(i2.failed).toBe(0);
        expect(i2.busyMs).toBeGreaterThan(i1.busyMs);
        expect(i1.serversCpuUs).toBeGreaterThan(0);
        const info = await c.info();
        expect(info.rssBytes).toBeGreaterThan(0);
        if (target === 'rdma') expect(info.qps).toBe(1);
        else expect(info.qps).toBeUndefined();
        // How often the receive queues ran dry (the incast ablations' RNR column): the client's
        // RDMA pool and the shard's, read through its metrics endpoint.
        if (target === 'rdma') expect(info.receiveQueueEmptied).toBeTypeOf('number');
        else expect(info.receiveQueueEmptied).toBeUndefined();
        if (target !== 'grpc') expect(await set?.receiveQueueEmptied()).toBeTypeOf('number');
      } finally {
        await c.close();
      }
      expect(alive(c.pid)).toBe(false);
    },
    120_000,
  );

  it('a bad request is an error of that request; the process keeps serving', async () => {
    const c = await spawn('tcp');
    try {
      // A round that adds to no row, and a negative rate.
      const round = { rate: 100, durationMs: 50, maxOutstanding: 4, seed: 1 };
      await expect(c.fetch({ ...round, fresh: false })).rejects.toThrow(/bad fetch request/);
      await expect(c.fetch({ ...round, rate: -1, fresh: true })).rejects.toThrow(/bad fetch/);
      expect((await c.fetch({ ...round, fresh: true })).failed).toBe(0);
    } finally {
      await c.close();
    }
  }, 60_000);

  it('a relabelled view shares the process and closes nothing', async () => {
    const c = await spawn('tcp');
    try {
      const ref = c.as('ref');
      expect(ref.variant).toBe('ref');
      expect(ref.pid).toBe(c.pid);
      await ref.close();
      expect(alive(c.pid)).toBe(true);
      expect((await ref.info()).rssBytes).toBeGreaterThan(0);
    } finally {
      await c.close();
    }
    expect(alive(c.pid)).toBe(false);
  }, 60_000);
});

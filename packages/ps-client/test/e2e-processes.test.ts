import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ParameterStore } from '@rdmajs/ps-server';
import { parseServiceTables } from '@rdmajs/ps-service';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsClient, type ShardSpec } from '../src/index.js';
import { pulledRows } from './support/pulled.js';
import { RemoteClient } from './support/remoteClient.js';
import { killStragglers, type ShardProcess, startShard } from './support/shardProcess.js';

// Real processes: three `rdmajs-ps-server` shards (the CLI, spawned) and two clients — one
// in this process, one in a child process — over TCP, and over RDMA (soft provider; the shards
// listen on RDMA and TCP at once) on loopback. Parameters must be bit-identical to one in-process ParameterStore fed the
// same pushes in the same order.

const secret = 'e2e-shared-secret-0123456789abcdef';
const SPEC = {
  tables: [
    {
      name: 'sgd_m',
      dim: 8,
      optimizer: { kind: 'sgd', lr: 0.05, momentum: 0.9 },
      init: { kind: 'normal', seed: 1, std: 0.1 },
    },
    {
      name: 'adagrad',
      dim: 8,
      optimizer: { kind: 'adagrad', lr: 0.1 },
      init: { kind: 'uniform', seed: 2 },
    },
    { name: 'adam', dim: 16, optimizer: { kind: 'adam', lr: 0.01 } },
    {
      name: 'adamw',
      dim: 4,
      optimizer: { kind: 'adamw', lr: 0.01, weightDecay: 0.1 },
      init: { kind: 'normal', seed: 4 },
    },
    { name: 'ftrl', dim: 8, optimizer: { kind: 'ftrl', alpha: 0.1, l1: 0.01 } },
    { name: 'sum', dim: 2, optimizer: { kind: 'sum' } },
    { name: 'assign', dim: 3, optimizer: { kind: 'assign' } },
  ],
  dense: [
    { name: 'd_adam', shape: [4, 8], optimizer: { kind: 'adam', lr: 0.01 } },
    { name: 'd_sgd', shape: [10], optimizer: { kind: 'sgd', lr: 0.1 } },
  ],
};
const DIMS = new Map(SPEC.tables.map((t) => [t.name, t.dim]));

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function keyPool(rand: () => number, n: number): bigint[] {
  return Array.from(
    { length: n },
    () => (BigInt(Math.floor(rand() * 2 ** 32)) << 32n) | BigInt(Math.floor(rand() * 2 ** 32)),
  );
}

const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));

type WorkloadClient = Pick<PsClient, 'pull' | 'push' | 'pullDense' | 'pushDense'> | RemoteClient;

/** A pull's rows as a private array (views checked and released for an in-process client). */
const rowsOf = (client: WorkloadClient, table: string, keys: BigUint64Array) =>
  client instanceof RemoteClient ? client.pull(table, keys) : pulledRows(client.pull(table, keys));

async function expectSameAsReference(
  client: WorkloadClient,
  ref: ParameterStore,
  pool: bigint[],
): Promise<void> {
  for (const [table, dim] of DIMS) {
    for (let at = 0; at < pool.length; at += 500) {
      const keys = BigUint64Array.from(pool.slice(at, at + 500));
      const want = new Float32Array(keys.length * dim);
      ref.pullInto(table, keys, want);
      expect(bits(await rowsOf(client, table, keys)), `table ${table}`).toEqual(bits(want));
    }
  }
  for (const d of SPEC.dense) {
    const n = d.shape.reduce((a, b) => a * b, 1);
    const want = new Float32Array(n);
    ref.pullDense(d.name, want);
    expect(bits(await client.pullDense(d.name)), `dense ${d.name}`).toEqual(bits(want));
  }
}

async function stopAll(shards: ShardProcess[]): Promise<void> {
  await Promise.all(
    shards.map(async (s) => {
      if (s.proc.exitCode !== null || s.proc.signalCode !== null) return;
      s.proc.kill('SIGTERM');
      const r = await s.exited;
      expect(r).toEqual({ code: 0, signal: null }); // clean shutdown: drained, snapshot, exit 0
      expect(s.logs.some((l) => l.msg === 'closed')).toBe(true);
    }),
  );
}

type Wire = 'tcp' | 'rdma';

/** Shards listen on RDMA and TCP at once for the RDMA runs (clients use the RDMA port). */
const shardArgs = (wire: Wire) => (wire === 'rdma' ? { transports: 'rdma,tcp' } : {});
const specOf = (wire: Wire, s: ShardProcess): ShardSpec =>
  wire === 'rdma'
    ? { id: s.id, ports: { rdma: s.ports.rdma as number, tcp: s.ports.tcp as number } }
    : { id: s.id, port: s.port };
const samePorts = (wire: Wire, s: ShardProcess) =>
  wire === 'rdma' ? { ports: [s.ports.rdma as number, s.ports.tcp as number] } : { port: s.port };

describe.each(['tcp', 'rdma'] as const)(
  '%s: 3 shard processes + 2 clients, seeded workload',
  (wire) => {
    let work: string;
    let shards: ShardProcess[] = [];
    let local: PsClient;
    let remote: RemoteClient;
    let clients: WorkloadClient[] = [];

    beforeAll(async () => {
      work = mkdtempSync(join(tmpdir(), 'ps-e2e-'));
      shards = await Promise.all(
        ['s0', 's1', 's2'].map((id) =>
          startShard({ id, workDir: work, tables: SPEC, secret, ...shardArgs(wire) }),
        ),
      );
      const servers = shards.map((s) => specOf(wire, s));
      [local, remote] = await Promise.all([
        PsClient.connect({ servers, transport: wire, secret }),
        RemoteClient.connect(servers, secret, wire),
      ]);
      clients = [local, remote];
      expect(local.stats().shards.map((s) => s.transport)).toEqual([wire, wire, wire]);
    });

    afterAll(async () => {
      await Promise.allSettled([local?.close(), remote?.close()]);
      try {
        await stopAll(shards);
      } finally {
        remote?.kill();
        killStragglers();
        rmSync(work, { recursive: true, force: true });
      }
    });

    const ref = new ParameterStore(parseServiceTables(SPEC));
    const rand = mulberry32(20261204);
    const pool = keyPool(rand, 1500);

    it('pull, push with every optimizer and dense give bit-identical parameters', async () => {
      const tables = [...DIMS.keys()];
      let seq = 0;
      for (let step = 0; step < 160; step++) {
        const client = clients[step % 2] as WorkloadClient;
        const table = tables[Math.floor(rand() * tables.length)] as string;
        const dim = DIMS.get(table) as number;
        const n = 1 + Math.floor(rand() * 64);
        // Duplicates on purpose: pull de-duplicates, push sums them in request order.
        const keys = BigUint64Array.from(
          { length: n },
          () => pool[Math.floor(rand() * pool.length)] as bigint,
        );
        const want = new Float32Array(n * dim);
        ref.pullInto(table, keys, want);
        expect(bits(await rowsOf(client, table, keys)), `step ${step} pull ${table}`).toEqual(
          bits(want),
        );
        const grads = Float32Array.from({ length: n * dim }, () => rand() * 2 - 1);
        await client.push(table, keys, grads);
        await ref.push(table, keys, grads, { session: 'ref', seq: ++seq });
        if (step % 8 === 0) {
          const d = SPEC.dense[(step / 8) % 2] as (typeof SPEC.dense)[number];
          const g = Float32Array.from(
            { length: d.shape.reduce((a, b) => a * b, 1) },
            () => rand() - 0.5,
          );
          await client.pushDense(d.name, g);
          await ref.pushDense(d.name, g, { session: 'ref', seq: ++seq });
        }
      }
      await expectSameAsReference(local, ref, pool);
      await expectSameAsReference(remote, ref, pool);
      // The work really was spread: every shard served pushes.
      const pushed = shards.map((s) => s.id);
      expect(new Set(pool.slice(0, 200).map((k) => local.shardOf(k)))).toEqual(new Set(pushed));
    });

    it('with one shard SIGSTOPped, partial pulls return the others with the right mask; full pulls fail typed', async () => {
      const client = local;
      const stopped = shards[1] as ShardProcess;
      const keys = BigUint64Array.from(pool.slice(0, 300));
      // Unseen keys too: their rows are init on every side.
      const fresh = BigUint64Array.from(keyPool(mulberry32(99), 50));
      const all = BigUint64Array.from([...keys, ...fresh, ...keys.slice(0, 20)]);
      const onStopped = Array.from(all, (k) => (client.shardOf(k) === stopped.id ? 1 : 0));
      expect(onStopped.some((x) => x === 1) && onStopped.some((x) => x === 0)).toBe(true);
      stopped.proc.kill('SIGSTOP');
      try {
        for (const table of ['adagrad', 'sgd_m', 'adam']) {
          const dim = DIMS.get(table) as number;
          const want = new Float32Array(all.length * dim);
          ref.pullInto(table, all, want);
          // The rows a stopped shard would have given: the table's init for its keys.
          const init = new ParameterStore(parseServiceTables(SPEC));
          const initRows = new Float32Array(all.length * dim);
          init.pullInto(table, all, initRows);
          for (let round = 0; round < 2; round++) {
            using r = await client.pull(table, all, { deadlineMs: 400, partial: true });
            expect(Array.from(r.missing)).toEqual(onStopped);
            expect(r.missingCount).toBe(onStopped.filter((x) => x === 1).length);
            expect(r.missingShards).toEqual([stopped.id]);
            for (let i = 0; i < all.length; i++) {
              const src = onStopped[i] === 1 ? initRows : want;
              expect(bits(r.rows.subarray(i * dim, (i + 1) * dim)), `${table} row ${i}`).toEqual(
                bits(src.subarray(i * dim, (i + 1) * dim)),
              );
            }
          }
        }
        // pullInto with partial gives the same mask.
        const out = new Float32Array(all.length * 8);
        const m = await client.pullInto('adagrad', all, out, { deadlineMs: 300, partial: true });
        expect(Array.from(m.missing)).toEqual(onStopped);
        // Keys of live shards only: nothing missing.
        const live = all.filter((_, i) => onStopped[i] === 0);
        expect(
          (await client.pull('adagrad', live, { deadlineMs: 300, partial: true })).missingCount,
        ).toBe(0);
        // Without partial: the typed deadline error.
        await expect(client.pull('adagrad', all, { deadlineMs: 300 })).rejects.toMatchObject({
          code: 'ERR_PS_CLIENT_DEADLINE',
        });
      } finally {
        stopped.proc.kill('SIGCONT');
      }
      // Resumed: full pulls answer again, the same rows as before.
      const want = new Float32Array(all.length * 8);
      ref.pullInto('adagrad', all, want);
      expect(bits(await pulledRows(client.pull('adagrad', all, { deadlineMs: 30_000 })))).toEqual(
        bits(want),
      );
    });
  },
);

describe.each(['tcp', 'rdma'] as const)(
  '%s: a shard SIGKILLed during a push stream and restarted from its data directory',
  (wire) => {
    let work: string;
    let shards: ShardProcess[] = [];
    let client: PsClient | undefined;

    beforeAll(() => {
      work = mkdtempSync(join(tmpdir(), 'ps-e2e-kill-'));
    });

    afterAll(async () => {
      await client?.close();
      try {
        await stopAll(shards);
      } finally {
        killStragglers();
        rmSync(work, { recursive: true, force: true });
      }
    });

    it('the client recovers by itself (also from a SIGTERM drain); final parameters equal the acknowledged pushes', async () => {
      shards = await Promise.all(
        ['k0', 'k1', 'k2'].map((id) =>
          startShard({
            id,
            workDir: work,
            tables: SPEC,
            secret,
            dataDir: join(work, id),
            extraArgs: ['--snapshot-interval', '300'],
            ...shardArgs(wire),
          }),
        ),
      );
      client = await PsClient.connect({
        servers: shards.map((s) => specOf(wire, s)),
        transport: wire,
        secret,
        heartbeatIntervalMs: 200,
        heartbeatMisses: 3,
      });
      const ref = new ParameterStore(parseServiceTables(SPEC));
      const rand = mulberry32(7);
      const pool = keyPool(rand, 600);
      const PUSHES = 260;
      const WINDOW = 8;
      const acked: boolean[] = [];
      const inFlight = new Set<Promise<void>>();
      let restarted: Promise<void> | undefined;
      let seq = 0;
      for (let i = 0; i < PUSHES; i++) {
        if (i === 80 || i === 160) {
          // Mid-stream, pushes in flight: kill k1 without warning (i = 80), or stop k2 the
          // clean way (SIGTERM: drain, snapshot, exit 0; i = 160), and bring it back from its dir.
          const at = i === 80 ? 1 : 2;
          const victim = shards[at] as ShardProcess;
          const signal = i === 80 ? 'SIGKILL' : 'SIGTERM';
          victim.proc.kill(signal);
          const previous = restarted;
          restarted = (async () => {
            await previous;
            const exit = await victim.exited;
            expect(exit).toEqual(
              signal === 'SIGKILL' ? { code: null, signal } : { code: 0, signal: null },
            );
            await new Promise((r) => setTimeout(r, 300));
            shards[at] = await startShard({
              id: victim.id,
              workDir: work,
              tables: SPEC,
              secret,
              ...samePorts(wire, victim),
              dataDir: join(work, victim.id),
              extraArgs: ['--snapshot-interval', '300'],
              ...shardArgs(wire),
            });
          })();
        }
        const table = i % 3 === 0 ? 'adagrad' : i % 3 === 1 ? 'adam' : 'sum';
        const dim = DIMS.get(table) as number;
        const n = 1 + Math.floor(rand() * 32);
        const keys = BigUint64Array.from(
          { length: n },
          () => pool[Math.floor(rand() * pool.length)] as bigint,
        );
        const grads = Float32Array.from({ length: n * dim }, () => rand() * 2 - 1);
        // Issue order is the order every shard applies them in, so the reference follows it.
        const p = client.push(table, keys, grads).then(() => {
          acked[i] = true;
        });
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p)).catch(() => {});
        await ref.push(table, keys, grads, { session: 'ref', seq: ++seq });
        if (i % 20 === 0) {
          const g = Float32Array.from({ length: 10 }, () => rand() - 0.5);
          const d = client.pushDense('d_sgd', g).then(() => {});
          inFlight.add(d);
          void d.finally(() => inFlight.delete(d)).catch(() => {});
          await ref.pushDense('d_sgd', g, { session: 'ref', seq: ++seq });
        }
        while (inFlight.size >= WINDOW) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
      await restarted;
      expect(acked.filter(Boolean).length).toBe(PUSHES);
      const k1 = client.stats().shards.find((s) => s.shard === 'k1');
      const k2 = client.stats().shards.find((s) => s.shard === 'k2');
      expect(k1?.relinks).toBeGreaterThanOrEqual(1);
      expect(k2?.relinks).toBeGreaterThanOrEqual(1);
      expect(k1?.state).toBe('connected');
      expect(k1?.transport).toBe(wire); // relinked over the same transport, no fallback
      expect(k1?.onFallback).toBe(false);
      expect(shards[2]?.logs.find((l) => l.msg === 'store restored')?.lsn).toBeGreaterThan(0);
      const restore = shards[1]?.logs.find((l) => l.msg === 'store restored');
      expect(restore?.lsn).toBeGreaterThan(0); // restored from its snapshot + push log
      expect(k1?.resent).toBeGreaterThanOrEqual(1); // pushes in flight at the kill were sent again
      await expectSameAsReference(client, ref, pool);
    });
  },
);

describe('auto: a shard process that refuses RDMA (TCP only)', () => {
  let work: string;
  let shard: ShardProcess | undefined;

  afterAll(async () => {
    try {
      if (shard !== undefined) await stopAll([shard]);
    } finally {
      killStragglers();
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('falls back to TCP per connection, visible in stats(), with the same parameters', async () => {
    work = mkdtempSync(join(tmpdir(), 'ps-e2e-auto-'));
    shard = await startShard({ id: 't0', workDir: work, tables: SPEC, secret });
    await using client = await PsClient.connect({
      servers: [{ id: 't0', port: shard.port }],
      transport: 'auto',
      secret,
      probeIntervalMs: 0,
      connectTimeoutMs: 2000, // the RDMA attempt waits for a setup answer that never comes
    });
    const s = client.stats().shards[0];
    expect([client.stats().transport, s?.transport, s?.onFallback]).toEqual(['auto', 'tcp', true]);
    const ref = new ParameterStore(parseServiceTables(SPEC));
    const rand = mulberry32(11);
    const pool = keyPool(rand, 200);
    for (let i = 0; i < 20; i++) {
      const keys = BigUint64Array.from(
        { length: 16 },
        () => pool[Math.floor(rand() * 200)] as bigint,
      );
      const grads = Float32Array.from({ length: 16 * 8 }, () => rand() - 0.5);
      await client.push('adagrad', keys, grads);
      await ref.push('adagrad', keys, grads, { session: 'ref', seq: i + 1 });
    }
    const keys = BigUint64Array.from(pool);
    const want = new Float32Array(pool.length * 8);
    ref.pullInto('adagrad', keys, want);
    expect(bits(await pulledRows(client.pull('adagrad', keys)))).toEqual(bits(want));
  });
});

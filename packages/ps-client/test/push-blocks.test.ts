// With registeredPushes over RDMA a push is built in the transport's registered memory; the
// block goes back to the pool once no session can read it: acknowledged, failed for good,
// resent after a reconnect, or the client closed. Otherwise, and over TCP, pushes stay on
// the heap.
import { RdmaTransport } from '@rdmajs/mux';
import { ParameterStore } from '@rdmajs/ps-server';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { ExponentialBackoff } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterEach, expect, it, vi } from 'vitest';
import { PsClient } from '../src/index.js';
import { PushBlocks, type PushPart } from '../src/PushBlocks.js';
import { pulledRows } from './support/pulled.js';

const secret = 'ps-client-push-blocks-secret-0123456789';
const spec = {
  tables: [{ name: 't', dim: 64, optimizer: { kind: 'sum' } }],
  dense: [{ name: 'bias', shape: [1000], optimizer: { kind: 'sum' } }],
};
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function rdmaShard(port = 0, server = new RdmaTransport()) {
  const service = await PsService.start({
    listen: [{ transport: server, port }],
    secret,
    shardId: 's0',
    tables: parseServiceTables(spec),
  });
  return { service, server, port: service.portOf('rdma') as number };
}

/** A client over its own RdmaTransport to one RDMA shard; all closed after the test. */
async function clientOfOneShard(
  o: { maxInFlightPushes?: number; registeredPushes?: boolean } = {},
) {
  const shard = await rdmaShard();
  cleanups.push(() => shard.server.close());
  cleanups.push(() => shard.service.close());
  const transport = new RdmaTransport();
  cleanups.push(() => transport.close());
  const client = await PsClient.connect({
    servers: [`127.0.0.1:${shard.port}`],
    transport,
    secret,
    registeredPushes: true,
    ...o,
  });
  return { transport, client };
}

const grads = (n: number, seed: number) =>
  Float32Array.from({ length: n * 64 }, (_, i) => ((i * 7 + seed) % 13) - 6);
const keys = (n: number, from: number) =>
  BigUint64Array.from({ length: n }, (_, i) => BigInt(from + i));

it('PushBlocks: a given-back block serves the next request of its size, as a slice; bounded; closed', () => {
  const transport = new RdmaTransport();
  cleanups.push(() => transport.close());
  const alloc = transport.allocator;
  const live0 = alloc.liveBlocks;
  const pool = new PushBlocks(alloc, 90_000);
  const a = pool.take(20_000);
  expect(a?.length).toBe(20_000);
  expect(alloc.owns((a as { block?: unknown }).block)).toBe(true); // a slice of a 32 KiB block
  pool.give(a as NonNullable<typeof a>);
  const b = pool.take(30_000); // same class: the same block again, no new registration
  expect((b as { block?: unknown }).block).toBe((a as { block?: unknown }).block);
  expect(alloc.liveBlocks).toBe(live0 + 1);
  // 90 000 bytes may be pinned: a third 32 KiB block would pass it, so the heap is used.
  const c = pool.take(32_768);
  const d = pool.take(32_768);
  expect(c).toBeDefined();
  expect(d).toBeUndefined();
  expect(pool.stats()).toEqual({ liveBlocks: 2, pinnedBytes: 65_536, taken: 3, refused: 1 });
  for (const p of [b, c]) pool.give(p as NonNullable<typeof p>);
  expect(pool.stats().liveBlocks).toBe(0);
  pool.close(); // the kept blocks go back to the allocator
  expect(alloc.liveBlocks).toBe(live0);
});

it("PushBlocks: a steady size reuses its block's slice (no BlockSlice per push)", () => {
  const transport = new RdmaTransport();
  cleanups.push(() => transport.close());
  const pool = new PushBlocks(transport.allocator, 90_000);
  const a = pool.take(20_000) as PushPart;
  const view = a.bytes;
  pool.give(a);
  const b = pool.take(20_000) as PushPart;
  expect(b).toBe(a); // the same block, the same length: the same slice and view
  expect(b.bytes).toBe(view);
  pool.give(b);
  const c = pool.take(30_000) as PushPart; // another length: a slice of its own
  expect(c).not.toBe(a);
  expect(c.length).toBe(30_000);
  expect((c as { block?: unknown }).block).toBe((a as { block?: unknown }).block);
  pool.give(c);
  pool.close();
});

it('with registeredPushes over RDMA a push goes out of a registered block, and every block comes back', async () => {
  const { client } = await clientOfOneShard();
  cleanups.push(() => client.close());
  const ref = new ParameterStore(parseServiceTables(spec));
  // 64 keys × 64 floats: 16 KiB, an eager SEND; 300 pushes, 16 at a time.
  for (let round = 0; round < 20; round++) {
    await Promise.all(
      Array.from({ length: 16 }, (_, j) => {
        const k = keys(64, ((round * 16 + j) % 5) * 64);
        const g = grads(64, round + j);
        return client.push('t', k, g);
      }),
    );
  }
  await client.pushDense(
    'bias',
    Float32Array.from({ length: 1000 }, (_, i) => i / 8),
  );
  const s = client.stats().pushBlocks;
  expect(s?.taken).toBe(20 * 16 + 1);
  expect(s?.refused).toBe(0);
  expect(s?.liveBlocks).toBe(0);
  expect(s?.pinnedBytes).toBe(0);
  // And the store applied exactly what was pushed.
  let seq = 0;
  for (let round = 0; round < 20; round++) {
    for (let j = 0; j < 16; j++) {
      const k = keys(64, ((round * 16 + j) % 5) * 64);
      await ref.push('t', k, grads(64, round + j), { session: 'r', seq: ++seq });
    }
  }
  const want = new Float32Array(5 * 64 * 64);
  ref.pullInto('t', keys(5 * 64, 0), want);
  expect(Array.from(await pulledRows(client.pull('t', keys(5 * 64, 0))))).toEqual(Array.from(want));
  expect((await client.pullDense('bias'))[8]).toBe(1);
});

it('blocks of pushes resent after the shard restarted come back once the old session is closed', async () => {
  const first = await rdmaShard();
  const server = first.server;
  cleanups.push(() => server.close());
  let service = first.service;
  cleanups.push(() => service.close());
  const client = await PsClient.connect({
    servers: [`127.0.0.1:${first.port}`],
    transport: 'rdma',
    secret,
    registeredPushes: true,
    heartbeatIntervalMs: 100,
    maxInFlightPushes: 4,
    backoff: () => new ExponentialBackoff({ baseMs: 20, capMs: 100, deadlineMs: 300 }),
  });
  cleanups.push(() => client.close());
  // A stream of pushes, the shard closed and started again under it.
  const pushes = Array.from({ length: 64 }, (_, i) =>
    client.push('t', keys(32, i * 32), grads(32, i), { deadlineMs: 20_000 }),
  );
  const restarted = (async () => {
    await service.close();
    service = (await rdmaShard(first.port, server)).service;
  })();
  const settled = await Promise.allSettled(pushes);
  await restarted;
  expect(settled.every((r) => r.status === 'fulfilled')).toBe(true);
  expect(client.stats().shards[0]?.relinks).toBeGreaterThanOrEqual(1);
  expect(client.stats().shards[0]?.resent).toBeGreaterThan(0); // sent on both sessions
  // The replaced session closes within its bounded close; then nothing is pinned.
  await vi.waitFor(() => expect(client.stats().pushBlocks?.liveBlocks).toBe(0), {
    timeout: 10_000,
    interval: 50,
  });
  expect(client.stats().pushBlocks?.taken).toBe(64);
});

it('closing the client with pushes queued gives every block back', async () => {
  const { client } = await clientOfOneShard({ maxInFlightPushes: 2 });
  const pushes = Array.from({ length: 50 }, (_, i) => client.push('t', keys(16, i), grads(16, i)));
  expect(client.stats().pushBlocks?.liveBlocks).toBe(50);
  await client.close();
  const settled = await Promise.allSettled(pushes);
  for (const r of settled) {
    if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'ERR_PS_CLIENT_CLOSED' });
  }
  const s = client.stats().pushBlocks;
  expect(s?.liveBlocks).toBe(0);
  expect(s?.pinnedBytes).toBe(0);
});

it('without registeredPushes, or over TCP, pushes stay on the heap; a non-boolean is refused', async () => {
  const plain = await clientOfOneShard({ registeredPushes: false });
  cleanups.push(() => plain.client.close());
  await plain.client.push('t', keys(4, 0), grads(4, 1));
  expect(plain.client.stats().pushBlocks).toBeUndefined();
  await expect(
    PsClient.connect({
      servers: ['127.0.0.1:1'],
      transport: 'tcp',
      secret,
      registeredPushes: 'yes' as unknown as boolean,
    }),
  ).rejects.toMatchObject({ code: 'ERR_PS_CLIENT_INVALID_ARG' });
  const service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 's0',
    tables: parseServiceTables(spec),
  });
  cleanups.push(() => service.close());
  const client = await PsClient.connect({
    servers: [`127.0.0.1:${service.port}`],
    transport: 'tcp',
    secret,
    registeredPushes: true,
  });
  cleanups.push(() => client.close());
  await client.push('t', keys(4, 0), grads(4, 1));
  expect(client.stats().pushBlocks).toBeUndefined();
  expect(Array.from(await pulledRows(client.pull('t', keys(1, 0)))).slice(0, 3)).toEqual(
    Array.from(grads(1, 1).subarray(0, 3)),
  );
});

import { ParameterStore } from '@rdmajs/ps-server';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsClient } from '../src/index.js';
import { pulledRows } from './support/pulled.js';

const secret = 'ps-client-test-secret-0123456789';
const spec = {
  tables: [
    {
      name: 'emb',
      dim: 4,
      optimizer: { kind: 'adagrad', lr: 0.1 },
      init: { kind: 'normal', seed: 3, std: 0.1 },
    },
    { name: 'raw', dim: 2, optimizer: { kind: 'sum' }, nonFinite: 'allow' },
    { name: 'wide', dim: 32, optimizer: { kind: 'adagrad', lr: 0.1 } },
  ],
  dense: [{ name: 'w', shape: [5], optimizer: { kind: 'sgd', lr: 0.5 } }],
};
const services: PsService[] = [];
let client: PsClient;

beforeAll(async () => {
  for (const id of ['a', 'b', 'c']) {
    services.push(
      await PsService.start({
        transport: new TcpTransport(),
        secret,
        shardId: id,
        maxBatchKeys: 1000,
        tables: parseServiceTables(spec),
      }),
    );
  }
  client = await PsClient.connect({
    servers: services.map((s) => `127.0.0.1:${s.port}`),
    transport: new TcpTransport(),
    secret,
  });
});

afterAll(async () => {
  await client?.close();
  await Promise.all(services.map((s) => s.close()));
});

const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));

describe('PsClient against three in-process shards', () => {
  it('learns the shards and tables', () => {
    expect(client.shards).toEqual(['a', 'b', 'c']);
    expect([...client.tables]).toEqual([
      ['emb', 4],
      ['raw', 2],
      ['wide', 32],
    ]);
  });

  it('pull de-duplicates, spreads over shards and returns request order; push matches a single store', async () => {
    const ref = new ParameterStore(parseServiceTables(spec));
    const keys = BigUint64Array.from([7n, 2n ** 64n - 1n, 7n, 123456789n, 0n, 99n, 7n, 5n]);
    const out = new Float32Array(keys.length * 4);
    ref.pullInto('emb', keys, out);
    expect(bits(await pulledRows(client.pull('emb', keys)))).toEqual(bits(out));
    const before = client.stats();
    expect(before.keysRequested - before.keysFetched).toBe(2);
    expect(new Set(Array.from(keys, (k) => client.shardOf(k))).size).toBeGreaterThan(1);
    const grads = Float32Array.from({ length: keys.length * 4 }, (_, i) => Math.sin(i) * 0.3);
    for (let step = 1; step <= 3; step++) {
      const s = await client.push('emb', keys, grads);
      await ref.push('emb', keys, grads, { session: 'ref', seq: step });
      expect(s.duplicates).toBe(0);
    }
    ref.pullInto('emb', keys, out);
    const mine = new Float32Array(keys.length * 4);
    await client.pullInto('emb', keys, mine);
    expect(bits(mine)).toEqual(bits(out));
    // The shards hold disjoint rows: the owner has the trained row, the others only init.
    const fresh = new ParameterStore(parseServiceTables(spec));
    for (let i = 0; i < keys.length; i++) {
      const k = BigUint64Array.of(keys[i] as bigint);
      const trained = new Float32Array(4);
      const init = new Float32Array(4);
      ref.pullInto('emb', k, trained);
      fresh.pullInto('emb', k, init);
      services.forEach((svc, s) => {
        const row = new Float32Array(4);
        svc.store.pullInto('emb', k, row);
        const owner = client.shardOf(keys[i] as bigint) === client.shards[s];
        expect(bits(row)).toEqual(bits(owner ? trained : init));
      });
    }
  });

  it('dense pull and push', async () => {
    await client.pushDense('w', Float32Array.of(1, 2, 3, 4, 5));
    expect(Array.from(await client.pullDense('w'))).toEqual([-0.5, -1, -1.5, -2, -2.5]);
  });

  it('concurrent pushes keep their order per shard', async () => {
    const keys = BigUint64Array.from({ length: 64 }, (_, i) => BigInt(i * 1000));
    const ref = new ParameterStore(parseServiceTables(spec));
    const all: Promise<unknown>[] = [];
    for (let step = 0; step < 20; step++) {
      const g = Float32Array.from({ length: 64 * 2 }, (_, i) => (i + 1) * (step + 1) * 1e-3);
      all.push(client.push('raw', keys, g));
      await ref.push('raw', keys, g, { session: 'r', seq: step + 1 });
    }
    await Promise.all(all);
    const want = new Float32Array(128);
    ref.pullInto('raw', keys, want);
    expect(bits(await pulledRows(client.pull('raw', keys)))).toEqual(bits(want));
  });

  it('refuses bad input before anything is sent', async () => {
    const sent = services.map((s) => s.stats().refused + s.stats().pushes + s.stats().pulls);
    const code = (f: () => unknown) =>
      Promise.resolve()
        .then(f)
        .then(
          () => 'resolved',
          (e: { code?: string }) => e.code,
        );
    expect(await code(() => client.pull('nope', [1n]))).toBe('ERR_PS_CLIENT_UNKNOWN_TABLE');
    expect(await code(() => client.pull('emb', [1] as unknown as bigint[]))).toBe(
      'ERR_PS_CLIENT_INVALID_ARG',
    );
    expect(await code(() => client.pull('emb', [-1n]))).toBe('ERR_PS_CLIENT_INVALID_ARG');
    expect(await code(() => client.pull('emb', [2n ** 64n]))).toBe('ERR_PS_CLIENT_INVALID_ARG');
    expect(await code(() => client.pullInto('emb', [1n], new Float32Array(3)))).toBe(
      'ERR_PS_CLIENT_LENGTH_MISMATCH',
    );
    expect(await code(() => client.push('emb', [1n, 2n], new Float32Array(4)))).toBe(
      'ERR_PS_CLIENT_LENGTH_MISMATCH',
    );
    expect(await code(() => client.push('emb', [1n], Float32Array.of(0, Number.NaN, 0, 0)))).toBe(
      'ERR_PS_CLIENT_NON_FINITE',
    );
    expect(await code(() => client.pull('emb', new BigUint64Array(1001)))).toBe(
      'ERR_PS_CLIENT_BATCH_TOO_LARGE',
    );
    expect(await code(() => client.pushDense('w', new Float32Array(4)))).toBe(
      'ERR_PS_CLIENT_LENGTH_MISMATCH',
    );
    expect(await code(() => client.pullDense('nope'))).toBe('ERR_PS_CLIENT_UNKNOWN_TABLE');
    expect(await code(() => client.pull('emb', [1n], { deadlineMs: 0 }))).toBe(
      'ERR_PS_CLIENT_INVALID_ARG',
    );
    expect(services.map((s) => s.stats().refused + s.stats().pushes + s.stats().pulls)).toEqual(
      sent,
    );
  });

  it('a full push queue refuses the whole push: no shard gets half of it', async () => {
    const c = await PsClient.connect({
      servers: services.map((s) => `127.0.0.1:${s.port}`),
      transport: new TcpTransport(),
      secret,
      maxQueuedPushes: 2,
    });
    try {
      const keys = BigUint64Array.from({ length: 30 }, (_, i) => BigInt(i + 5000));
      const before = await pulledRows(c.pull('raw', keys));
      const g = new Float32Array(60).fill(1);
      const outcomes = await Promise.allSettled(
        Array.from({ length: 6 }, () => c.push('raw', keys, g)),
      );
      const ok = outcomes.filter((o) => o.status === 'fulfilled').length;
      const refused = outcomes.filter(
        (o) =>
          o.status === 'rejected' &&
          (o.reason as { code?: string }).code === 'ERR_PS_CLIENT_OVERLOADED',
      ).length;
      expect(ok).toBe(2);
      expect(refused).toBe(4);
      const after = await pulledRows(c.pull('raw', keys));
      // Each applied push adds 1 in float32 (the table is `sum`).
      for (let i = 0; i < after.length; i++) {
        let want = before[i] as number;
        for (let k = 0; k < ok; k++) want = Math.fround(want + 1);
        expect(after[i]).toBe(want);
      }
    } finally {
      await c.close();
    }
  });

  it('a shard that does not match the list is refused at connect', async () => {
    await expect(
      PsClient.connect({
        servers: [{ port: services[0]?.port as number, id: 'zz' }],
        transport: new TcpTransport(),
        secret,
      }),
    ).rejects.toMatchObject({ code: 'ERR_PS_CLIENT_SHARD_MISMATCH' });
  });

  it('close fails later calls typed, and is idempotent', async () => {
    const c = await PsClient.connect({
      servers: [`127.0.0.1:${services[0]?.port}`],
      transport: new TcpTransport(),
      secret,
    });
    await c.close();
    await c.close();
    await expect(c.pull('emb', [1n])).rejects.toMatchObject({ code: 'ERR_PS_CLIENT_CLOSED' });
  });

  it('pulls reuse their plans: varying batches and tables, held rows stay right while later pulls reuse released plans', async () => {
    const ref = new ParameterStore(parseServiceTables(spec));
    const want = (table: string, dim: number, keys: BigUint64Array) => {
      const out = new Float32Array(keys.length * dim);
      ref.pullInto(table, keys, out);
      return bits(out);
    };
    // Keys no other test pushed to (their rows are the init on every shard and in `ref`).
    const batch = (n: number, salt: number) =>
      BigUint64Array.from(
        { length: n },
        (_, i) => 5_000_000_000n + BigInt(((i * 7919 + salt) % (n + 3)) + salt),
      );
    // A pull held across the others: its plan is not reused until it is released.
    const heldKeys = batch(50, 11);
    const held = await client.pull('emb', heldKeys);
    const heldWant = want('emb', 4, heldKeys);
    for (let round = 0; round < 30; round++) {
      const n = 1 + ((round * 37) % 90);
      const [table, dim] = round % 3 === 2 ? ['wide', 32] : ['emb', 4];
      const keys = batch(n, round * 1000);
      // Two at once: each takes its own plan.
      const other = batch(n + 5, round * 1000 + 500);
      const [a, b] = await Promise.all([
        pulledRows(client.pull(table as string, keys)),
        pulledRows(client.pull('emb', other)),
      ]);
      expect(bits(a)).toEqual(want(table as string, dim as number, keys));
      expect(bits(b)).toEqual(want('emb', 4, other));
    }
    const got = new Float32Array(heldKeys.length * 4);
    for (let i = 0; i < held.count; i++) got.set(held.row(i), i * 4);
    expect(bits(got)).toEqual(heldWant);
    held.release();
    expect(() => held.row(0)).toThrow(expect.objectContaining({ code: 'ERR_PS_CLIENT_RELEASED' }));
    // Its plan is reused by the next pull; the released rows stay unusable.
    await pulledRows(client.pull('emb', heldKeys));
    expect(() => held.row(0)).toThrow(expect.objectContaining({ code: 'ERR_PS_CLIENT_RELEASED' }));
  });

  it('a push of wide rows (each copied with one set into its shard request) matches a single store', async () => {
    const ref = new ParameterStore(parseServiceTables(spec));
    const keys = BigUint64Array.from({ length: 40 }, (_, i) => BigInt(1000 + ((i * 7) % 37)));
    expect(new Set(Array.from(keys, (k) => client.shardOf(k))).size).toBe(3);
    const grads = Float32Array.from({ length: keys.length * 32 }, (_, i) => Math.cos(i) * 0.2);
    for (let step = 1; step <= 2; step++) {
      await client.push('wide', keys, grads);
      await ref.push('wide', keys, grads, { session: 'ref', seq: step });
    }
    const want = new Float32Array(keys.length * 32);
    ref.pullInto('wide', keys, want);
    const got = new Float32Array(keys.length * 32);
    await client.pullInto('wide', keys, got);
    expect(bits(got)).toEqual(bits(want));
  });
});

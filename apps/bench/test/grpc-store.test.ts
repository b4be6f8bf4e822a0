import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { ParameterStore, type SparseTableConfig } from '@rdmajs/ps-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcStoreClient, GrpcStoreError } from '../src/baselines/grpc/GrpcStoreClient.js';
import { GrpcStoreServer } from '../src/baselines/grpc/GrpcStoreServer.js';
import { loadService } from '../src/baselines/grpc/protocol.js';

const tables: SparseTableConfig[] = [
  {
    name: 'emb',
    dim: 4,
    optimizer: { kind: 'sgd', lr: 0.5 },
    init: { kind: 'normal', seed: 3, std: 0.1 },
  },
];

describe('the gRPC parameter-store baseline', () => {
  let server: GrpcStoreServer;
  let client: GrpcStoreClient;
  beforeAll(async () => {
    server = await GrpcStoreServer.start(tables);
    client = new GrpcStoreClient(server.port);
  });
  afterAll(async () => {
    client?.close();
    await server?.close();
  });

  it('serves the same rows as the store itself, before and after pushes, in request order', async () => {
    const local = new ParameterStore({ tables });
    const keys = BigUint64Array.of(5n, 2n ** 63n + 1n, 5n, 77n);
    const grads = Float32Array.from({ length: 16 }, (_, i) => i / 10);
    const want = new Float32Array(16);
    local.pullInto('emb', keys, want);
    expect(await client.pull('emb', keys)).toEqual(want);
    const r = await client.push('emb', keys, grads, { session: 's1', seq: 1 });
    expect(r).toMatchObject({ applied: true, duplicate: false });
    expect(r.rows).toBe((await local.push('emb', keys, grads, { session: 's1', seq: 1 })).rows);
    local.pullInto('emb', keys, want);
    expect(await client.pull('emb', keys)).toEqual(want);
  });

  it('does not apply a retransmitted (session, seq) twice', async () => {
    const keys = BigUint64Array.of(900n);
    const grads = Float32Array.of(1, 1, 1, 1);
    const before = await client.pull('emb', keys);
    await client.push('emb', keys, grads, { session: 's2', seq: 7 });
    const once = await client.pull('emb', keys);
    expect(await client.push('emb', keys, grads, { session: 's2', seq: 7 })).toMatchObject({
      applied: false,
      duplicate: true,
    });
    expect(await client.pull('emb', keys)).toEqual(once);
    expect(once).not.toEqual(before);
  });

  it('answers bad requests with a status and keeps serving', async () => {
    const err = (p: Promise<unknown>) =>
      p.then(
        () => undefined,
        (e: unknown) => e,
      );
    const unknown = await err(client.pull('nope', BigUint64Array.of(1n)));
    expect(unknown).toBeInstanceOf(GrpcStoreError);
    expect((unknown as GrpcStoreError).status).toBe(grpc.status.NOT_FOUND);
    const wrongDim = await err(
      client.push('emb', BigUint64Array.of(1n), Float32Array.of(1), { session: 's', seq: 1 }),
    );
    expect((wrongDim as GrpcStoreError).status).toBe(grpc.status.INVALID_ARGUMENT);
    // Raw frames a hostile peer could send: keys not a whole number of u64, grads not of f32.
    const { Client } = loadService();
    const raw = new Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    const call = (method: string, req: object) =>
      new Promise<grpc.ServiceError | null>((resolve) =>
        (raw as unknown as Record<string, (...a: unknown[]) => void>)[method]?.call(
          raw,
          req,
          { deadline: Date.now() + 10_000 },
          (e: grpc.ServiceError | null) => resolve(e),
        ),
      );
    try {
      expect((await call('Pull', { table: 'emb', keys: Buffer.alloc(7) }))?.code).toBe(
        grpc.status.INVALID_ARGUMENT,
      );
      const push = { table: 'emb', keys: Buffer.alloc(8), grads: Buffer.alloc(15), session: 's' };
      expect((await call('Push', { ...push, seq: '1' }))?.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(
        (await call('Push', { ...push, grads: Buffer.alloc(16), seq: '18446744073709551615' }))
          ?.code,
      ).toBe(grpc.status.INVALID_ARGUMENT);
    } finally {
      raw.close();
    }
    expect(await client.pull('emb', BigUint64Array.of(1n))).toHaveLength(4);
  });
});

describe('rdmajs-bench grpc-store', () => {
  it('measures pull and push at each batch size with both processes’ CPU', () => {
    const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
    const file = join(mkdtempSync(join(tmpdir(), 'bench-grpc-')), 'out.json');
    execFileSync(
      process.execPath,
      ['--import', 'tsx', '--conditions=@rdmajs/source', cli, 'grpc-store'].concat([
        '--iterations',
        '60',
        '--json',
        file,
      ]),
      { encoding: 'utf8', timeout: 120_000, env: { ...process.env, CI: '1' } },
    );
    const json = JSON.parse(readFileSync(file, 'utf8')) as {
      results: {
        transport: string;
        op: string;
        batchKeys: number;
        p50Us: number;
        cpuUsPerOp: number;
      }[];
    };
    expect(json.results.map((r) => `${r.transport}/${r.op}/${r.batchKeys}`)).toEqual(
      [1, 16, 256, 4096].flatMap((b) => [`grpc/pull/${b}`, `grpc/push/${b}`]),
    );
    for (const r of json.results) {
      expect(r.p50Us).toBeGreaterThan(0);
      expect(r.cpuUsPerOp).toBeGreaterThan(0);
    }
  });
});

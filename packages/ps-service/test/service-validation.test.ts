import {
  decodePullDenseReply,
  decodePullReply,
  decodePushReply,
  decodeTableInfoReply,
  encodePullDenseRequest,
  encodePullRequest,
  encodePushDenseRequest,
  encodePushRequest,
  encodeTableInfoRequest,
  PsMessageKind,
  PsMethod,
} from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsService, parseServiceTables } from '../src/index.js';

const secret = 'ps-service-test-secret-0123456789';
let service: PsService;
let client: RpcClient;

beforeAll(async () => {
  service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 's0',
    maxBatchKeys: 16,
    metrics: { port: 0 },
    tables: parseServiceTables({
      tables: [
        { name: 'emb', dim: 2, optimizer: { kind: 'sgd', lr: 0.5 } },
        { name: 'loose', dim: 1, optimizer: { kind: 'sum' }, nonFinite: 'allow' },
      ],
      dense: [{ name: 'w', shape: [3], optimizer: { kind: 'sum' } }],
    }),
  });
  client = await RpcClient.connect({ transport: new TcpTransport(), port: service.port, secret });
});

afterAll(async () => {
  await client?.close();
  await service?.close();
});

const pull = async (table: string, keys: bigint[]) =>
  decodePullReply(
    await client.call(
      PsMethod.pull,
      encodePullRequest({ table, keys: BigUint64Array.from(keys) }),
      {
        idempotent: true,
      },
    ),
  );
const push = async (table: string, seq: number, dim: number, keys: bigint[], grads: number[]) =>
  decodePushReply(
    await client.call(
      PsMethod.push,
      encodePushRequest({
        table,
        writer: 'w1',
        seq,
        dim,
        keys: BigUint64Array.from(keys),
        grads: Float32Array.from(grads),
      }),
    ),
  );
const remoteCode = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: { code?: string; remoteCode?: string }) => e.remoteCode ?? e.code,
  );

describe('ps-service over TCP', () => {
  it('serves table info', async () => {
    const info = decodeTableInfoReply(
      await client.call(PsMethod.tableInfo, encodeTableInfoRequest(), { idempotent: true }),
    );
    expect(info).toEqual({
      shardId: 's0',
      maxBatchKeys: 16,
      tables: [
        { name: 'emb', dim: 2, rejectNonFinite: true, init: { kind: 'zeros' } },
        { name: 'loose', dim: 1, rejectNonFinite: false, init: { kind: 'zeros' } },
      ],
      dense: [{ name: 'w', length: 3, rejectNonFinite: true }],
    });
  });

  it('pull sees a push; a repeated (writer, seq) is acknowledged, not applied', async () => {
    expect(Array.from((await pull('emb', [5n, 6n])).rows)).toEqual([0, 0, 0, 0]);
    expect(await push('emb', 1, 2, [5n, 5n], [1, 2, 3, 4])).toEqual({
      applied: true,
      duplicate: false,
      rows: 1,
      dropped: 0,
    });
    expect(Array.from((await pull('emb', [6n, 5n])).rows)).toEqual([0, 0, -2, -3]);
    expect(await push('emb', 1, 2, [5n], [100, 100])).toEqual({
      applied: false,
      duplicate: true,
      rows: 0,
      dropped: 0,
    });
    expect(Array.from((await pull('emb', [5n])).rows)).toEqual([-2, -3]);
  });

  it('refuses bad requests with typed codes and applies nothing', async () => {
    const before = Array.from((await pull('emb', [5n])).rows);
    expect(await remoteCode(pull('nope', [1n]))).toBe('ERR_PS_REQUEST_UNKNOWN_TABLE');
    expect(await remoteCode(push('nope', 10, 2, [5n], [1, 1]))).toBe(
      'ERR_PS_REQUEST_UNKNOWN_TABLE',
    );
    expect(await remoteCode(push('emb', 11, 3, [5n], [1, 1, 1]))).toBe('ERR_PS_REQUEST_WRONG_DIM');
    expect(await remoteCode(push('emb', 12, 2, [5n], [Number.NaN, 1]))).toBe(
      'ERR_PS_REQUEST_NON_FINITE',
    );
    expect(await remoteCode(push('emb', 13, 2, [5n], [Number.POSITIVE_INFINITY, 1]))).toBe(
      'ERR_PS_REQUEST_NON_FINITE',
    );
    const many = Array.from({ length: 17 }, (_, i) => BigInt(i));
    expect(await remoteCode(pull('emb', many))).toBe('ERR_PS_REQUEST_BATCH_TOO_LARGE');
    expect(await remoteCode(push('emb', 14, 2, many, new Array(34).fill(1)))).toBe(
      'ERR_PS_REQUEST_BATCH_TOO_LARGE',
    );
    // A malformed payload: the wire decoder's code comes back.
    const bad = encodePullRequest({ table: 'emb', keys: BigUint64Array.of(1n) }).subarray(0, 20);
    expect(await remoteCode(client.call(PsMethod.pull, bad, { idempotent: true }))).toBe(
      'ERR_PS_WIRE_TRUNCATED',
    );
    const wrongLen = encodePushDenseRequest({
      name: 'w',
      writer: 'w1',
      seq: 15,
      grads: new Float32Array(2),
    });
    expect(await remoteCode(client.call(PsMethod.pushDense, wrongLen))).toBe(
      'ERR_PS_REQUEST_LENGTH_MISMATCH',
    );
    expect(Array.from((await pull('emb', [5n])).rows)).toEqual(before);
    // The refused seqs were not recorded: a later seq still applies.
    expect((await push('emb', 16, 2, [5n], [0, 0])).applied).toBe(true);
    expect(service.stats().refused).toBeGreaterThanOrEqual(9);
  });

  it('a table whose policy allows NaN takes it', async () => {
    expect((await push('loose', 20, 1, [1n], [Number.NaN])).applied).toBe(true);
    expect(Number.isNaN((await pull('loose', [1n])).rows[0])).toBe(true);
  });

  it('dense pull and push', async () => {
    const r = decodePushReply(
      await client.call(
        PsMethod.pushDense,
        encodePushDenseRequest({
          name: 'w',
          writer: 'w1',
          seq: 30,
          grads: Float32Array.of(1, 2, 3),
        }),
      ),
      PsMessageKind.PushDenseReply,
    );
    expect(r.applied).toBe(true);
    const v = decodePullDenseReply(
      await client.call(PsMethod.pullDense, encodePullDenseRequest({ name: 'w' }), {
        idempotent: true,
      }),
    );
    expect(Array.from(v)).toEqual([1, 2, 3]);
  });
});

describe('metrics', () => {
  it('serves Prometheus text with request, refusal and key counts', async () => {
    const res = await fetch(`http://127.0.0.1:${service.metricsPort}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(
      /rdmajs_ps_requests_total\{method="ps.pull",outcome="ok",shard="s0"\} [1-9]/,
    );
    expect(text).toMatch(
      /rdmajs_ps_requests_total\{method="ps.push",outcome="refused",shard="s0"\} [1-9]/,
    );
    expect(text).toMatch(/rdmajs_ps_keys_total\{method="ps.pull",shard="s0"\} [1-9]/);
    expect(text).toMatch(/rdmajs_ps_push_duplicates_total\{shard="s0"\} [1-9]/);
    expect(text).toMatch(
      /rdmajs_ps_request_duration_seconds_bucket\{le="\+Inf",shard="s0",method="ps.push"\} [1-9]/,
    );
    expect(text).toMatch(/rdmajs_ps_connections\{shard="s0"\} 1/);
    expect((await fetch(`http://127.0.0.1:${service.metricsPort}/other`)).status).toBe(404);
  });
});

describe('table file validation', () => {
  it('names the first bad field', () => {
    const bad = (x: unknown) => {
      try {
        parseServiceTables(x);
        return 'ok';
      } catch (e) {
        return `${(e as { code: string }).code}: ${(e as Error).message}`;
      }
    };
    expect(bad({ tables: [{ name: 'a', dim: 0, optimizer: { kind: 'sum' } }] })).toMatch(
      /ERR_PS_SERVICE_CONFIG: table file: tables.0.dim/,
    );
    expect(bad({ tables: [{ name: 'a', dim: 1, optimizer: { kind: 'rmsprop' } }] })).toMatch(
      /tables.0.optimizer/,
    );
    expect(bad({ tables: [{ name: 'a', dim: 1, optimizer: { kind: 'sum' }, extra: 1 }] })).toMatch(
      /ERR_PS_SERVICE_CONFIG/,
    );
    expect(
      bad({
        tables: [
          { name: 'a', dim: 1, optimizer: { kind: 'sum' } },
          { name: 'a', dim: 2, optimizer: { kind: 'sum' } },
        ],
      }),
    ).toMatch(/duplicate name a/);
    expect(bad({ tables: [] })).toBe('ok');
  });
});

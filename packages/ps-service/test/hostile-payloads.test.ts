import {
  decodePullReply,
  encodePullDenseRequest,
  encodePullRequest,
  encodePushDenseRequest,
  encodePushRequest,
  encodeTableInfoRequest,
  PsMethod,
} from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PsService, parseServiceTables } from '../src/index.js';

const secret = 'ps-service-fuzz-secret-0123456789';
let service: PsService;

beforeAll(async () => {
  service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 'fz',
    maxBatchKeys: 256,
    tables: parseServiceTables({
      tables: [{ name: 'emb', dim: 4, optimizer: { kind: 'adagrad', lr: 0.1 } }],
      dense: [{ name: 'w', shape: [6], optimizer: { kind: 'sum' } }],
    }),
  });
});

afterAll(async () => {
  await service?.close();
});

const valid: [string, Uint8Array][] = [
  [PsMethod.pull, encodePullRequest({ table: 'emb', keys: BigUint64Array.of(1n, 2n, 3n) })],
  [
    PsMethod.push,
    encodePushRequest({
      table: 'emb',
      writer: 'fz',
      seq: 1,
      dim: 4,
      keys: BigUint64Array.of(9n, 8n),
      grads: new Float32Array(8).fill(0.5),
    }),
  ],
  [PsMethod.pullDense, encodePullDenseRequest({ name: 'w' })],
  [
    PsMethod.pushDense,
    encodePushDenseRequest({ name: 'w', writer: 'fz', seq: 2, grads: new Float32Array(6) }),
  ],
  [PsMethod.tableInfo, encodeTableInfoRequest()],
];

it('thousands of seeded malformed payloads: typed refusals, the shard keeps serving others', async () => {
  const fuzzer = await RpcClient.connect({
    transport: new TcpTransport(),
    port: service.port,
    secret,
  });
  const bystander = await RpcClient.connect({
    transport: new TcpTransport(),
    port: service.port,
    secret,
  });
  const rand = fc.sample(
    fc.tuple(
      fc.nat({ max: valid.length - 1 }),
      fc.oneof(
        fc.array(fc.tuple(fc.nat({ max: 200 }), fc.integer({ min: 0, max: 255 })), {
          minLength: 1,
          maxLength: 6,
        }),
        fc.uint8Array({ maxLength: 120 }),
        fc.nat({ max: 100 }),
      ),
    ),
    { numRuns: 3000, seed: 20261204 },
  );
  const codes = new Map<string, number>();
  const probe = encodePullRequest({ table: 'emb', keys: BigUint64Array.of(12345n) });
  for (let at = 0; at < rand.length; at += 100) {
    const batch = rand.slice(at, at + 100).map(async ([m, how]) => {
      const [method, base] = valid[m] as [string, Uint8Array];
      let payload: Uint8Array;
      if (Array.isArray(how)) {
        payload = base.slice();
        for (const [i, x] of how) payload[i % payload.length] = x;
      } else if (how instanceof Uint8Array) payload = how;
      else payload = base.subarray(0, how % (base.length + 1)); // truncated
      try {
        await fuzzer.call(method, payload, {
          idempotent: method !== PsMethod.push && method !== PsMethod.pushDense,
        });
        codes.set('ok', (codes.get('ok') ?? 0) + 1);
      } catch (err) {
        const e = err as { code?: string; remoteCode?: string };
        expect(e.code).toBe('ERR_RPC_REMOTE');
        expect(e.remoteCode).toMatch(/^ERR_PS_(WIRE|REQUEST|INVALID_ARG|UNKNOWN_TABLE|SEQ_GAP)/);
        codes.set(e.remoteCode as string, (codes.get(e.remoteCode as string) ?? 0) + 1);
      }
    });
    await Promise.all(batch);
    // Between rounds the other client is served as usual.
    const r = decodePullReply(await bystander.call(PsMethod.pull, probe, { idempotent: true }));
    expect(r.count).toBe(1);
  }
  expect(codes.get('ERR_PS_WIRE_TRUNCATED')).toBeGreaterThan(0);
  expect(
    [...codes.keys()].filter((c) => c.startsWith('ERR_PS_WIRE')).length,
  ).toBeGreaterThanOrEqual(3);
  expect(service.state).toBe('serving');
  await fuzzer.close();
  await bystander.close();
});

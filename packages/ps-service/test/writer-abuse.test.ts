// Regression tests for the sec10 review's M4 (a push under another writer's id with a huge
// seq silenced that writer) and L1 (finite gradients drove rows to ±Infinity under
// nonFinite 'reject'), through the service's wire.
import {
  decodePullReply,
  decodePushReply,
  encodePullRequest,
  encodePushRequest,
  PsMethod,
} from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { PsService, parseServiceTables } from '../src/index.js';

const secret = 'ps-service-test-secret-0123456789';
let service: PsService;
let victim: RpcClient;
let attacker: RpcClient;

beforeAll(async () => {
  service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 's0',
    tables: parseServiceTables({
      tables: [{ name: 'emb', dim: 1, optimizer: { kind: 'sgd', lr: 1 } }],
    }),
  });
  victim = await RpcClient.connect({ transport: new TcpTransport(), port: service.port, secret });
  attacker = await RpcClient.connect({ transport: new TcpTransport(), port: service.port, secret });
});

afterAll(async () => {
  await victim?.close();
  await attacker?.close();
  await service?.close();
});

const push = async (c: RpcClient, writer: string, seq: number, key: bigint, g: number) =>
  decodePushReply(
    await c.call(
      PsMethod.push,
      encodePushRequest({
        table: 'emb',
        writer,
        seq,
        dim: 1,
        keys: BigUint64Array.of(key),
        grads: Float32Array.of(g),
      }),
    ),
  );
const pull = async (key: bigint) =>
  decodePullReply(
    await victim.call(
      PsMethod.pull,
      encodePullRequest({ table: 'emb', keys: BigUint64Array.of(key) }),
      { idempotent: true },
    ),
  ).rows[0];

it('a push under another writer’s id with seq 2^53-1 is refused (ERR_PS_SEQ_GAP); the writer goes on', async () => {
  expect((await push(victim, 'wVictim', 1, 7n, -1)).applied).toBe(true);
  expect(await pull(7n)).toBe(1);
  const err = await push(attacker, 'wVictim', Number.MAX_SAFE_INTEGER, 8n, 0).catch(
    (e: unknown) => e,
  );
  expect(err).toMatchObject({ code: 'ERR_RPC_REMOTE', remoteCode: 'ERR_PS_SEQ_GAP' });
  const r = await push(victim, 'wVictim', 2, 7n, -1);
  expect(r.applied).toBe(true);
  expect(r.duplicate).toBe(false);
  expect(await pull(7n)).toBe(2);
});

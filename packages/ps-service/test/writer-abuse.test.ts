// Hostile authenticated clients against the store's writer ids, through the service's wire:
// writer ids are bound to the RPC session that pushes under them (another session's pushes
// under them are refused, so forged seqs cannot silence a writer), a session uses one writer,
// a peer creates a bounded number of new writers (the store's writer table cannot be filled),
// a push of no keys is refused, and a writer whose session is gone is taken over by its
// client's next session with exactly-once intact (and the sec10 review's M4: maxSeqGap).
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
const QUOTA = 4;
let service: PsService;
let victim: RpcClient;
let attacker: RpcClient;
const clients: RpcClient[] = [];

const connect = async (host = '127.0.0.1') => {
  const c = await RpcClient.connect({
    transport: new TcpTransport(),
    host,
    port: service.port,
    secret,
  });
  clients.push(c);
  return c;
};

beforeAll(async () => {
  service = await PsService.start({
    transport: new TcpTransport(),
    host: '::',
    secret,
    shardId: 's0',
    maxNewWritersPerPeer: QUOTA,
    tables: parseServiceTables({
      tables: [{ name: 'emb', dim: 1, optimizer: { kind: 'sgd', lr: 1 } }],
    }),
  });
  // The victim comes from another host (::1) than the attacker (127.0.0.1).
  victim = await connect('::1');
  attacker = await connect('127.0.0.1');
});

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await service?.close();
});

const pushReq = (writer: string, seq: number, keys: bigint[], g = -1) =>
  encodePushRequest({
    table: 'emb',
    writer,
    seq,
    dim: 1,
    keys: BigUint64Array.from(keys),
    grads: new Float32Array(keys.length).fill(g),
  });
const push = async (c: RpcClient, writer: string, seq: number, key: bigint, g = -1) =>
  decodePushReply(await c.call(PsMethod.push, pushReq(writer, seq, [key], g)));
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e,
  );
const pull = async (key: bigint) =>
  decodePullReply(
    await victim.call(
      PsMethod.pull,
      encodePullRequest({ table: 'emb', keys: BigUint64Array.of(key) }),
      { idempotent: true },
    ),
  ).rows[0];

it('another session cannot push under a connected writer’s id: forged seqs are refused, the writer goes on', async () => {
  expect((await push(victim, 'wVictim', 1, 7n)).applied).toBe(true);
  // The attack of the review: seq = last + 65 536, repeated, under the victim's id.
  for (let i = 1; i <= 3; i++) {
    const err = await refusal(push(attacker, 'wVictim', 1 + i * 65_536, 8n, 100));
    expect(err).toMatchObject({
      code: 'ERR_RPC_REMOTE',
      remoteCode: 'ERR_PS_REQUEST_WRITER_IN_USE',
    });
  }
  expect(await pull(8n)).toBe(0);
  // The victim's next pushes apply: none is answered as a duplicate.
  for (let seq = 2; seq <= 4; seq++) {
    const r = await push(victim, 'wVictim', seq, 7n);
    expect([r.applied, r.duplicate]).toEqual([true, false]);
  }
  expect(await pull(7n)).toBe(4);
});

it('a writer’s own session is still held to maxSeqGap (ERR_PS_SEQ_GAP), and goes on', async () => {
  const err = await refusal(push(victim, 'wVictim', Number.MAX_SAFE_INTEGER, 8n, 0));
  expect(err).toMatchObject({ code: 'ERR_RPC_REMOTE', remoteCode: 'ERR_PS_SEQ_GAP' });
  const r = await push(victim, 'wVictim', 5, 7n);
  expect([r.applied, r.duplicate]).toEqual([true, false]);
  expect(await pull(7n)).toBe(5);
});

it('a session pushes under one writer id (ERR_PS_REQUEST_TOO_MANY_WRITERS)', async () => {
  const err = await refusal(push(victim, 'wOther', 1, 9n));
  expect(err).toMatchObject({ remoteCode: 'ERR_PS_REQUEST_TOO_MANY_WRITERS' });
  expect(await pull(9n)).toBe(0);
});

it('a push of no keys is refused before the store sees it (no writer slot taken)', async () => {
  const err = await refusal(attacker.call(PsMethod.push, pushReq('wEmpty', 1, [])));
  expect(err).toMatchObject({ remoteCode: 'ERR_PS_WIRE_FIELD' });
});

it('one host cannot fill the writer table: new writers beyond its quota are refused, other hosts go on', async () => {
  // Each writer from its own session (one writer per session), all from 127.0.0.1.
  const refusals: unknown[] = [];
  for (let i = 0; i < QUOTA + 3; i++) {
    const c = i === 0 ? attacker : await connect('127.0.0.1');
    const e = await refusal(push(c, `wFlood${i}`, 1, 100n + BigInt(i), 0));
    if (e !== undefined) refusals.push(e);
  }
  expect(refusals).toHaveLength(3);
  for (const e of refusals) {
    expect(e).toMatchObject({
      code: 'ERR_RPC_REMOTE',
      remoteCode: 'ERR_PS_REQUEST_WRITER_QUOTA',
      retryable: false,
    });
  }
  // A legitimate new writer from another host is served.
  const other = await connect('::1');
  const r = await push(other, 'wLegit', 1, 11n);
  expect([r.applied, r.duplicate]).toEqual([true, false]);
});

it('a client whose session ended resumes its writer on a new session, exactly once', async () => {
  const first = await connect('::1');
  expect((await push(first, 'wRelink', 1, 12n)).applied).toBe(true);
  expect((await push(first, 'wRelink', 2, 12n)).applied).toBe(true);
  await first.close(); // its session ends (as when the client restarts or its session fails)
  const second = await connect('::1');
  // The resend of an applied push is a duplicate, the next one applies.
  const again = await push(second, 'wRelink', 2, 12n);
  expect([again.applied, again.duplicate]).toEqual([false, true]);
  const next = await push(second, 'wRelink', 3, 12n);
  expect([next.applied, next.duplicate]).toEqual([true, false]);
  expect(await pull(12n)).toBe(3);
  // And the writer is now bound to the new session.
  const err = await refusal(push(attacker, 'wRelink', 4, 12n));
  expect(err).toMatchObject({ remoteCode: 'ERR_PS_REQUEST_WRITER_IN_USE' });
});

import { ParameterStore } from '@rdmajs/ps-server';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { encodePullRequest, PsMethod } from '@rdmajs/ps-wire';
import { RpcClient } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { expect, it } from 'vitest';
import { PsClient } from '../src/index.js';
import { pulledRows } from './support/pulled.js';

const secret = 'ps-client-bounds-secret-0123456789';
const spec = {
  tables: [
    { name: 'wide', dim: 4096, optimizer: { kind: 'sum' }, init: { kind: 'uniform', seed: 1 } },
  ],
};

it('pulls beyond one message are split; the server refuses them unsplit; such pushes are refused', async () => {
  const service = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 'w0',
    maxBatchKeys: 4096,
    tables: parseServiceTables(spec),
  });
  const client = await PsClient.connect({
    servers: [`127.0.0.1:${service.port}`],
    transport: new TcpTransport(),
    secret,
  });
  const raw = await RpcClient.connect({
    transport: new TcpTransport(),
    port: service.port,
    secret,
  });
  try {
    const keys = BigUint64Array.from({ length: 1100 }, (_, i) => BigInt(i * 7 + 1)); // 18 MB of rows
    await expect(
      raw.call(PsMethod.pull, encodePullRequest({ table: 'wide', keys }), { idempotent: true }),
    ).rejects.toMatchObject({ remoteCode: 'ERR_PS_REQUEST_BATCH_TOO_LARGE' });
    const ref = new ParameterStore(parseServiceTables(spec));
    const g = new Float32Array(1000 * 4096).fill(0.25);
    await client.push('wide', keys.subarray(0, 1000), g); // 16.4 MB: one message
    await ref.push('wide', keys.slice(0, 1000), g, { session: 'r', seq: 1 });
    await expect(client.push('wide', keys, new Float32Array(1100 * 4096))).rejects.toMatchObject({
      code: 'ERR_PS_CLIENT_BATCH_TOO_LARGE',
    });
    const want = new Float32Array(1100 * 4096);
    ref.pullInto('wide', keys, want);
    const got = await pulledRows(client.pull('wide', keys));
    expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer))).toBe(true);
  } finally {
    await raw.close();
    await client.close();
    await service.close();
  }
});

it('a dense tensor that cannot fit in one message is refused at start', async () => {
  await expect(
    PsService.start({
      transport: new TcpTransport(),
      secret,
      shardId: 'w1',
      tables: parseServiceTables({
        tables: [],
        dense: [{ name: 'big', shape: [4_200_000], optimizer: { kind: 'sum' } }],
      }),
    }),
  ).rejects.toMatchObject({ code: 'ERR_PS_SERVICE_CONFIG' });
});

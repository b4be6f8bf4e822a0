import { ParameterStore } from '@rdmajs/ps-server';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { ExponentialBackoff } from '@rdmajs/rpc-recovery';
import { TcpTransport } from '@rdmajs/tcp';
import { expect, it } from 'vitest';
import { PsClient } from '../src/index.js';
import { pulledRows } from './support/pulled.js';

const secret = 'ps-client-outage-secret-0123456789';
const spec = { tables: [{ name: 't', dim: 2, optimizer: { kind: 'sum' } }] };

it('a shard gone past every budget fails typed, then is used again once it is back', async () => {
  const start = (port = 0) =>
    PsService.start({
      transport: new TcpTransport(),
      secret,
      shardId: 's0',
      port,
      tables: parseServiceTables(spec),
    });
  let service = await start();
  const port = service.port;
  const client = await PsClient.connect({
    servers: [`127.0.0.1:${port}`],
    transport: new TcpTransport(),
    secret,
    heartbeatIntervalMs: 100,
    reconnectBudgetMs: 300,
    backoff: () => new ExponentialBackoff({ baseMs: 20, capMs: 50, deadlineMs: 300 }),
  });
  try {
    await client.push('t', [1n], Float32Array.of(1, 1));
    await service.close(); // drains, then the shard is gone (in memory: its rows with it)
    await expect(
      client.push('t', [1n], Float32Array.of(1, 1), { deadlineMs: 5000 }),
    ).rejects.toMatchObject({
      code: expect.stringMatching(/^ERR_PS_CLIENT_(UNAVAILABLE|DEADLINE)$/),
    });
    await expect(client.pull('t', [1n], { deadlineMs: 300 })).rejects.toMatchObject({
      code: expect.stringMatching(/^ERR_PS_CLIENT_(UNAVAILABLE|DEADLINE)$/),
    });
    using partial = await client.pull('t', [1n, 2n], { deadlineMs: 200, partial: true });
    expect(Array.from(partial.missing)).toEqual([1, 1]);
    service = await start(port);
    // The link revives on use: a new session, and the new (empty) shard answers.
    const ref = new ParameterStore(parseServiceTables(spec));
    await client.push('t', [1n], Float32Array.of(2, 3), { deadlineMs: 10_000 });
    await ref.push('t', BigUint64Array.of(1n), Float32Array.of(2, 3), { session: 'r', seq: 1 });
    const want = new Float32Array(2);
    ref.pullInto('t', BigUint64Array.of(1n), want);
    expect(Array.from(await pulledRows(client.pull('t', [1n], { deadlineMs: 10_000 })))).toEqual(
      Array.from(want),
    );
    expect(client.stats().shards[0]?.relinks).toBeGreaterThanOrEqual(1);
  } finally {
    await client.close();
    await service.close();
  }
});

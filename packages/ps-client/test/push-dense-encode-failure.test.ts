// A dense push whose request fails to encode gives its registered block back (it was never
// queued): a leak here would eat the PushBlocks budget one block per failure.
import { RdmaTransport } from '@rdmajs/mux';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { afterEach, expect, it, vi } from 'vitest';
import { PsClient } from '../src/index.js';

const encodeFails = vi.hoisted(() => ({ on: false }));
vi.mock('@rdmajs/ps-wire', async (importOriginal) => {
  const wire = await importOriginal<typeof import('@rdmajs/ps-wire')>();
  return {
    ...wire,
    encodePushDenseRequestInto: (...args: Parameters<typeof wire.encodePushDenseRequestInto>) => {
      if (encodeFails.on) throw new Error('encoding failed');
      return wire.encodePushDenseRequestInto(...args);
    },
  };
});

const secret = 'ps-client-dense-encode-secret-0123456789';
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a dense push that fails to encode gives its registered block back', async () => {
  const server = new RdmaTransport();
  cleanups.push(() => server.close());
  const service = await PsService.start({
    listen: [{ transport: server, port: 0 }],
    secret,
    shardId: 's0',
    tables: parseServiceTables({
      tables: [],
      dense: [{ name: 'bias', shape: [1000], optimizer: { kind: 'sum' } }],
    }),
  });
  cleanups.push(() => service.close());
  const transport = new RdmaTransport();
  cleanups.push(() => transport.close());
  const client = await PsClient.connect({
    servers: [`127.0.0.1:${service.portOf('rdma') as number}`],
    transport,
    secret,
    registeredPushes: true,
  });
  cleanups.push(() => client.close());
  const grad = new Float32Array(1000).fill(0.5);
  encodeFails.on = true;
  await expect(client.pushDense('bias', grad)).rejects.toThrow('encoding failed');
  expect(client.stats().pushBlocks).toMatchObject({ taken: 1, liveBlocks: 0, pinnedBytes: 0 });
  encodeFails.on = false;
  await client.pushDense('bias', grad); // the seq left unused by the failure is no obstacle
  expect(client.stats().pushBlocks).toMatchObject({ taken: 2, liveBlocks: 0 });
}, 30_000);

import type { Channel, Connection } from '@rdmajs/mux';
import { expect, it } from 'vitest';
import { TcpTransport } from '../src/index.js';

const SECRET = 'write-batching test secret, 32+ bytes';

it('sends_of_one_tick_reach_the_kernel_as_one_batched_write', async () => {
  // No heartbeat can fall between the burst's writes.
  const transport = new TcpTransport({ heartbeatIntervalMs: 600_000, peerTimeoutMs: 1_200_000 });
  await using listener = await transport.listen({ secret: SECRET });
  const accepted = new Promise<Connection>((r) => listener.once('connection', r));
  await using client = await transport.connect({ port: listener.port, secret: SECRET });
  const server = await accepted;
  const inbound = new Promise<Channel>((r) => server.once('channel', r));
  const ch = client.openChannel('batch');
  const before = client.stats();
  const N = 200;
  const sends: Promise<void>[] = [];
  for (let i = 0; i < N; i++) sends.push(ch.send(new Uint8Array([i & 0xff, 1, 2, 3])));
  await Promise.all(sends);
  const after = client.stats();
  expect(after.framesOut - before.framesOut).toBe(N);
  // One cork per tick: the whole burst is one writev (the Open frame went in the same one).
  expect(after.writes - before.writes).toBe(1);
  const sch = await inbound;
  for (let i = 0; i < N; i++) {
    const m = await sch.receive({ timeoutMs: 30_000 });
    expect(m.bytes[0]).toBe(i & 0xff);
    m.release();
  }
  await server.close();
});

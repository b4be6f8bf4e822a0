import type { Channel, Connection, InboundMessage } from '@rdmajs/mux';
import { expect, it } from 'vitest';
import { TcpTransport } from '../src/index.js';

const SECRET = 'close-after-goaway test secret, 32+ bytes';
const MiB = 1024 * 1024;
const LONG = { timeoutMs: 60_000 };

it('messages_released_after_the_goaway_write_nothing_and_both_sides_close_cleanly', async () => {
  // A small window: releasing a quarter of it makes a credit due at once, which used to be
  // written after the socket's end (write after end: the connection failed).
  const transport = new TcpTransport({ maxMessageBytes: 1 * MiB, windowBytes: 1 * MiB + 16 });
  await using listener = await transport.listen({ secret: SECRET });
  const accepted = new Promise<Connection>((r) => listener.once('connection', r));
  const client = await transport.connect({ port: listener.port, secret: SECRET });
  const server = await accepted;
  server.on('channel', async (ch: Channel) => {
    try {
      for await (const m of ch) {
        try {
          await ch.send(m.bytes, LONG);
        } finally {
          m.release();
        }
      }
      await ch.close(LONG);
    } catch {
      // the connection went away
    }
  });
  const ch = client.openChannel('echo');
  const kept: InboundMessage[] = [];
  for (const n of [300_000, 10, 400_000]) {
    await ch.send(new Uint8Array(n).fill(n & 0xff), LONG);
    kept.push(await ch.receive(LONG));
  }
  let framesAtGoAway = -1;
  // The server enters 'closing' when the client's goaway arrives: the client has ended by then.
  server.on('state', (st) => {
    if (st !== 'closing') return;
    framesAtGoAway = client.stats().framesOut;
    for (const m of kept.splice(0)) m.release();
  });
  const serverClosed = new Promise((resolve) => server.once('close', resolve));
  await client.close(LONG);
  await serverClosed;
  expect(framesAtGoAway).toBeGreaterThan(0);
  expect(client.stats().framesOut).toBe(framesAtGoAway);
  expect(client.state).toBe('closed');
  expect(client.error).toBeUndefined();
  expect(server.state).toBe('closed');
  expect(server.error).toBeUndefined();
});

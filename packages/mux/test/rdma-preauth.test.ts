// Regression tests for the sec10 review's M3 on RdmaTransport's listener (shared admission
// code with TcpTransport, see packages/tcp/test/preauth-admission.test.ts) and the close
// that arrives before the handshake listeners attach.
import net from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { RdmaTransport } from '../src/index.js';

const SECRET = 'rdma preauth admission test secret, 32+ bytes';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a full table of silent sockets does not lock a real client out: the oldest is dropped', async () => {
  const server = new RdmaTransport({ maxPendingHandshakes: 64, firstMessageTimeoutMs: 60_000 });
  const listener = await server.listen({ secret: SECRET });
  cleanups.push(async () => {
    await listener.close();
    server.close();
  });
  const closed: boolean[] = [];
  for (let i = 0; i < 64; i++) {
    const s = net.connect({ port: listener.port, host: '127.0.0.1' });
    closed.push(false);
    s.on('error', () => {});
    s.on('end', () => s.destroy());
    s.on('close', () => {
      closed[i] = true;
    });
    cleanups.push(() => {
      s.destroy();
    });
    await new Promise<void>((r) => s.once('connect', () => r()));
  }
  await expect.poll(() => listener.pending.size, { timeout: 20_000 }).toBe(64);
  listener.on('connection', (c) => cleanups.push(() => c.destroy()));
  const client = new RdmaTransport();
  cleanups.push(() => client.close());
  const conn = await client.connect({ port: listener.port, secret: SECRET, timeoutMs: 20_000 });
  cleanups.push(() => conn.destroy());
  await expect.poll(() => closed.filter((c) => c).length, { timeout: 20_000 }).toBe(1);
  expect(closed[0]).toBe(true);
});

it('a client dropped by the server before the handshake sees ERR_MUX_CONNECTION_LOST', async () => {
  const server = net.createServer((s) => s.destroy());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.address() as net.AddressInfo).port;
  const client = new RdmaTransport();
  cleanups.push(() => client.close());
  const err = await client
    .connect({ port, secret: SECRET, timeoutMs: 60_000 })
    .catch((e: unknown) => e);
  expect(err).toMatchObject({ code: 'ERR_MUX_CONNECTION_LOST' });
});

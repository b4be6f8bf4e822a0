// Regression tests for the sec10 review's M3 (lockout before authentication) and its side
// observation (a server dropping us at once looked like a deadline to the client).
import net from 'node:net';
import { hostKey } from '@rdmajs/mux';
import { afterEach, describe, expect, it } from 'vitest';
import { TcpTransport } from '../src/index.js';

const SECRET = 'preauth admission test secret, 32+ bytes';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Silent {
  socket: net.Socket;
  closed: boolean;
}

async function silent(port: number): Promise<Silent> {
  const socket = net.connect({ port, host: '127.0.0.1' });
  const s: Silent = { socket, closed: false };
  socket.on('error', () => {});
  // The server ends or resets the socket; either way it is gone for us.
  socket.on('end', () => {
    s.closed = true;
    socket.destroy();
  });
  socket.on('close', () => {
    s.closed = true;
  });
  cleanups.push(() => {
    socket.destroy();
  });
  await new Promise<void>((r) => socket.once('connect', () => r()));
  return s;
}

async function connectOk(port: number): Promise<void> {
  const c = await new TcpTransport().connect({ port, secret: SECRET, timeoutMs: 20_000 });
  await c.close();
}

describe('pending handshakes', () => {
  it('256 silent sockets do not lock a real client out: the oldest is dropped', async () => {
    const listener = await new TcpTransport({ firstMessageTimeoutMs: 60_000 }).listen({
      secret: SECRET,
    });
    cleanups.push(() => listener.close());
    const idle: Silent[] = [];
    for (let i = 0; i < 256; i++) idle.push(await silent(listener.port));
    await expect.poll(() => listener.handshaking.size, { timeout: 20_000 }).toBe(256);
    const codes: string[] = [];
    listener.on('reject', (err) => codes.push((err as unknown as { code: string }).code));
    await connectOk(listener.port);
    await expect.poll(() => idle.filter((s) => s.closed).length, { timeout: 20_000 }).toBe(1);
    expect(idle[0]?.closed).toBe(true);
    expect(codes).toEqual(['ERR_MUX_HANDSHAKE']);
  });

  it('one host holds at most maxPendingHandshakesPerLoopbackHost: its oldest goes first', async () => {
    const listener = await new TcpTransport({
      maxPendingHandshakesPerLoopbackHost: 4,
      firstMessageTimeoutMs: 60_000,
    }).listen({ secret: SECRET });
    cleanups.push(() => listener.close());
    const idle: Silent[] = [];
    for (let i = 0; i < 4; i++) idle.push(await silent(listener.port));
    await expect.poll(() => listener.handshaking.size, { timeout: 20_000 }).toBe(4);
    idle.push(await silent(listener.port));
    await expect.poll(() => idle[0]?.closed, { timeout: 20_000 }).toBe(true);
    await expect.poll(() => listener.handshaking.size, { timeout: 20_000 }).toBe(4);
    expect(idle.map((s) => s.closed)).toEqual([true, false, false, false, false]);
    await connectOk(listener.port); // drops idle[1] and completes
    expect(idle[1]?.closed).toBe(true);
  });

  it('a socket that sends nothing is dropped after firstMessageTimeoutMs with ERR_MUX_DEADLINE', async () => {
    const listener = await new TcpTransport({ firstMessageTimeoutMs: 100 }).listen({
      secret: SECRET,
    });
    cleanups.push(() => listener.close());
    const codes: string[] = [];
    listener.on('reject', (err) => codes.push((err as unknown as { code: string }).code));
    const s = await silent(listener.port);
    await expect.poll(() => s.closed, { timeout: 20_000 }).toBe(true);
    await expect.poll(() => codes, { timeout: 20_000 }).toEqual(['ERR_MUX_DEADLINE']);
    expect(listener.handshaking.size).toBe(0);
  });

  it('a client dropped by the server before the handshake sees ERR_MUX_CONNECTION_LOST', async () => {
    const server = net.createServer((s) => s.destroy());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
    const port = (server.address() as net.AddressInfo).port;
    const err = await new TcpTransport()
      .connect({ port, secret: SECRET, timeoutMs: 60_000 })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_MUX_CONNECTION_LOST' });
  });
});

describe('hostKey', () => {
  it('groups IPv6 by /64, unwraps v4-mapped addresses, keeps IPv4 and ::1', () => {
    expect(hostKey('10.0.0.1')).toBe('10.0.0.1');
    expect(hostKey('::ffff:10.0.0.1')).toBe('10.0.0.1');
    expect(hostKey('::1')).toBe('::1');
    expect(hostKey('2001:db8:1:2::5')).toBe('2001:db8:1:2::/64');
    expect(hostKey('2001:db8:1:2:aa:bb:cc:dd')).toBe('2001:db8:1:2::/64');
    expect(hostKey('2001:DB8::1')).toBe('2001:db8:0:0::/64');
    expect(hostKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(hostKey(undefined)).toBe('?');
  });
});

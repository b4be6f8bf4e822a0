// Regression tests for the sec10 review's M2: what we queue for a peer that stops reading is
// bounded by this side (send window cap, socket backlog bound), not by the peer's claims.
import net from 'node:net';
import {
  type Connection,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  FrameType,
  HANDSHAKE_MESSAGE_BYTES,
  Handshake,
  type SessionKeys,
} from '@rdmajs/mux';
import { afterEach, expect, it } from 'vitest';
import { TcpTransport, type TcpTransportOptions } from '../src/index.js';
import { SealedWriter } from '../src/internal/SealedWriter.js';

const SECRET = 'send limits test secret, 32+ bytes long';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A peer announcing the largest window there is, opening channel 1, then reading nothing. */
async function greedyPeer(options: TcpTransportOptions) {
  const listener = await new TcpTransport({ peerTimeoutMs: 60_000, ...options }).listen({
    secret: SECRET,
  });
  cleanups.push(() => listener.close());
  const serverConn = new Promise<Connection>((r) => listener.once('connection', r));
  const socket = net.connect({ port: listener.port, host: '127.0.0.1' });
  socket.on('error', () => {});
  cleanups.push(() => {
    socket.destroy();
  });
  const hs = new Handshake({
    role: 'client',
    secret: SECRET,
    limits: { maxFrameBytes: 16 << 20, windowBytes: 0xffffffff, windowMessages: 0xffffffff },
    transport: 'tcp-sealed',
  });
  await new Promise<void>((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= HANDSHAKE_MESSAGE_BYTES && hs.state !== 'done') {
        const reply = hs.receive(buf.subarray(0, HANDSHAKE_MESSAGE_BYTES));
        buf = buf.subarray(HANDSHAKE_MESSAGE_BYTES);
        if (reply !== undefined) socket.write(reply);
      }
      if (hs.state === 'done') {
        socket.off('data', onData);
        socket.pause(); // from now on it reads nothing
        resolve();
      }
    };
    socket.on('data', onData);
    socket.once('connect', () => socket.write(hs.start()));
    socket.once('close', () => reject(new Error('closed during the handshake')));
  });
  const name = Buffer.from('x');
  const h = Buffer.alloc(FRAME_HEADER_BYTES);
  encodeFrameHeader(h, 0, FrameType.Open, 1, 0, name.length);
  new SealedWriter(socket, (hs.sessionKeys as SessionKeys).send).write(Buffer.concat([h, name]));
  const conn = await serverConn;
  conn.on('error', () => {});
  cleanups.push(() => conn.destroy());
  const ch = await new Promise<import('@rdmajs/mux').Channel>((r) => conn.once('channel', r));
  return { conn, ch };
}

it('the send window is capped locally: a peer announcing 4 GiB gets maxSendWindowBytes', async () => {
  const { ch } = await greedyPeer({ maxSendWindowBytes: 1 << 20 });
  const payload = new Uint8Array(64 * 1024);
  let sent = 0;
  let err: unknown;
  for (let i = 0; i < 64 && err === undefined; i++) {
    await ch.send(payload, { timeoutMs: 300 }).then(
      () => {
        sent++;
      },
      (e: unknown) => {
        err = e;
      },
    );
  }
  // 15 × (64 KiB + 16) fit in 1 MiB; the peer never returns credit, so the 16th waits.
  expect(sent).toBe(15);
  expect(err).toMatchObject({ code: 'ERR_MUX_DEADLINE' });
});

it('sends wait for drain once the socket backlog passes maxSocketBacklogBytes', async () => {
  const { ch } = await greedyPeer({ maxSocketBacklogBytes: 256 * 1024 });
  const payload = new Uint8Array(1 << 20);
  const results = await Promise.allSettled(
    Array.from({ length: 64 }, () =>
      Promise.race([
        ch.send(payload, { timeoutMs: 2_000 }),
        // A send that went onto the socket settles when the kernel took it (never, here).
        new Promise<void>((r) => setTimeout(r, 5_000)),
      ]),
    ),
  );
  const refused = results.filter(
    (r) => r.status === 'rejected' && (r.reason as { code?: string }).code === 'ERR_MUX_DEADLINE',
  ).length;
  // At most what the kernel's loopback buffers hold (a few MiB) went out; 64 MiB did not.
  expect(refused).toBeGreaterThanOrEqual(32);
}, 30_000);

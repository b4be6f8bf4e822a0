// Regression tests for the sec10 review's M1: a peer that holds what it receives, or never
// answers Done, can neither hold the transport's shared budget nor pin a send forever.

import { afterEach, expect, it } from 'vitest';
import {
  type Channel,
  type InboundMessage,
  type RdmaConnection,
  RdmaTransport,
  type RdmaTransportOptions,
} from '../src/index.js';
import { ControlType } from '../src/internal/ControlLink.js';
import { type RoguePeer, roguePeer } from './support/roguePeer.js';

const SECRET = 'rdma send limits test secret, 32+ bytes';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('a peer holding its messages gets only maxSendWindowBytes: sends to another peer still go', async () => {
  const server = new RdmaTransport({
    budget: { maxBytes: 2 << 20, maxMessages: 1 << 20 },
    maxMessageBytes: 64 * 1024,
    maxSendWindowBytes: 256 * 1024,
  });
  const listener = await server.listen({ secret: SECRET });
  const serverChannels: Channel[] = [];
  const ready: Array<() => void> = [];
  listener.on('connection', (c) => {
    const conn = c as RdmaConnection;
    conn.on('error', () => {});
    conn.on('channel', (ch) => {
      serverChannels.push(ch);
      ready.shift()?.();
    });
  });
  const slow = new RdmaTransport();
  const healthy = new RdmaTransport();
  cleanups.push(async () => {
    await listener.close();
    server.close();
    slow.close();
    healthy.close();
  });
  const opened = () => new Promise<void>((r) => ready.push(r));
  const a = await slow.connect({ port: listener.port, secret: SECRET });
  let w = opened();
  const chA = a.openChannel('x');
  await w;
  const b = await healthy.connect({ port: listener.port, secret: SECRET });
  w = opened();
  const chB = b.openChannel('x');
  await w;
  const [toA, toB] = serverChannels as [Channel, Channel];
  const held: InboundMessage[] = [];
  const holding = (async () => {
    try {
      for (;;) held.push(await chA.receive({ timeoutMs: 60_000 }));
    } catch {
      // closed
    }
  })();
  const payload = new Uint8Array(4096);
  let delivered = 0;
  let err: unknown;
  for (let i = 0; i < 1024 && err === undefined; i++) {
    await toA.send(payload, { timeoutMs: 300 }).then(
      () => {
        delivered++;
      },
      (e: unknown) => {
        err = e;
      },
    );
  }
  // 256 KiB / (4 KiB + 16) = 63 messages; the 2 MiB budget would have admitted 510.
  expect(delivered).toBe(63);
  expect(err).toMatchObject({ code: 'ERR_MUX_DEADLINE' });
  await toB.send(payload, { timeoutMs: 20_000 });
  const m = await chB.receive({ timeoutMs: 20_000 });
  expect(m.bytes.length).toBe(4096);
  m.release();
  for (const x of held) x.release();
  await a.close();
  await holding;
});

async function offeredToRogue(
  options: RdmaTransportOptions,
): Promise<{ sent: Promise<void>; rogue: RoguePeer }> {
  const server = new RdmaTransport(options);
  const listener = await server.listen({ secret: SECRET });
  cleanups.push(async () => {
    await listener.close();
    server.close();
  });
  // Wrapped: a promise resolved with a promise would wait for the send itself.
  let resolveSent: (s: { p: Promise<void> }) => void = () => {};
  const sentP = new Promise<{ p: Promise<void> }>((r) => {
    resolveSent = r;
  });
  listener.on('connection', (c) => {
    const conn = c as RdmaConnection;
    conn.on('error', () => {});
    cleanups.push(() => conn.destroy());
    // Built in the connection's pool: sent in place, settled by the peer's Done.
    conn.on('channel', (ch) =>
      resolveSent({ p: ch.send(conn.allocator.alloc(64 * 1024, 'remote-read')) }),
    );
  });
  const rogue = await roguePeer(listener.port, SECRET);
  cleanups.push(() => rogue.close());
  // The control link stays alive: only the missing Done can end the connection.
  const ping = setInterval(() => rogue.link.send(ControlType.Ping), 50);
  cleanups.push(() => clearInterval(ping));
  await rogue.open(1);
  const sent = (await sentP).p;
  sent.catch(() => {});
  return { sent, rogue };
}

it('a zero-copy send whose Done never comes fails with ERR_MUX_PEER_TIMEOUT after doneTimeoutMs', async () => {
  const { sent } = await offeredToRogue({ doneTimeoutMs: 200, peerTimeoutMs: 60_000 });
  await expect(sent).rejects.toMatchObject({ code: 'ERR_MUX_PEER_TIMEOUT' });
});

it('after the peer’s GoAway, a zero-copy send it never read ends at once, not at doneTimeoutMs', async () => {
  // A peer that leaves will never READ what it was offered: the send settles ERR_MUX_CLOSED
  // (what is still in flight after that is bounded by defaultTimeoutMs).
  const { sent, rogue } = await offeredToRogue({
    doneTimeoutMs: 600_000,
    peerTimeoutMs: 60_000,
    defaultTimeoutMs: 300,
  });
  rogue.link.send(ControlType.GoAway);
  await expect(sent).rejects.toMatchObject({ code: 'ERR_MUX_CLOSED' });
});

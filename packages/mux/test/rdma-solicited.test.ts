// Solicited-only arming: a sleeping connection is woken by the peer's SENDs (posted
// solicited), not by its own send completions. These are the waits that need those
// completions anyway, with a peer that sends nothing meanwhile: each must end, not hang.

import { afterEach, expect, it } from 'vitest';
import {
  type Channel,
  type InboundMessage,
  type PollPolicy,
  type RdmaConnection,
  RdmaTransport,
  type RdmaTransportOptions,
} from '../src/index.js';

const SECRET = 'rdma solicited test secret, 32+ bytes!';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A client connection and the server's end of one channel opened on it. */
async function pair(
  policy: PollPolicy,
  server: RdmaTransportOptions = {},
  client: RdmaTransportOptions = {},
): Promise<{ conn: RdmaConnection; ch: Channel; far: Channel; clientT: RdmaTransport }> {
  const serverT = new RdmaTransport({ pollPolicy: policy, ...server });
  const clientT = new RdmaTransport({ pollPolicy: policy, ...client });
  const listener = await serverT.listen({ secret: SECRET });
  const farCh = new Promise<Channel>((resolve) =>
    listener.on('connection', (c) => {
      c.on('error', () => {});
      c.on('channel', resolve);
    }),
  );
  const conn = (await clientT.connect({ port: listener.port, secret: SECRET })) as RdmaConnection;
  conn.on('error', () => {});
  cleanups.push(async () => {
    conn.destroy();
    await listener.close();
    serverT.close();
    clientT.close();
  });
  const ch = conn.openChannel('solicited');
  return { conn, ch, far: await farCh, clientT };
}

for (const policy of ['event', 'adaptive'] as const) {
  it(`${policy}: send() of the application's blocks resolves at its own completion while the peer stays silent, and waits out a full window`, async () => {
    // The server holds what it receives (no credit or window comes back) until told.
    const { conn, ch, far, clientT } = await pair(policy, { windowMessages: 8 });
    const held: InboundMessage[] = [];
    const holding = (async () => {
      for (;;) {
        try {
          held.push(await far.receive({ timeoutMs: 60_000 }));
        } catch {
          return;
        }
      }
    })();
    const block = clientT.allocator.alloc(256);
    block.bytes.fill(7);
    // Gathered from the block: each send() resolves only at its SEND's completion, which is
    // unsolicited and the server sends nothing, so it must wake this side on its own.
    for (let i = 0; i < 8; i++) await ch.send(block, { timeoutMs: 5_000 });
    expect(conn.stats().sendWindowBytes).toBe(8 * (256 + 16));
    // The window is full: this one waits for a window return (a solicited SEND of the peer).
    let sent = false;
    const ninth = ch.send(block, { timeoutMs: 10_000 }).then(() => {
      sent = true;
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(sent).toBe(false);
    while (held.length < 8) await new Promise((r) => setTimeout(r, 5));
    for (const m of held.splice(0)) m.release();
    await ninth;
    while (held.length < 1) await new Promise((r) => setTimeout(r, 5));
    expect(held[0]?.bytes.every((b) => b === 7)).toBe(true);
    for (const m of held.splice(0)) m.release();
    // Close waits for every own completion too.
    await ch.close({ timeoutMs: 5_000 });
    await conn.close({ timeoutMs: 5_000 });
    await holding;
    block.release();
  });

  it(`${policy}: a READ of more chunks than the send queue holds completes with a silent sender`, async () => {
    // 4 KiB chunks: a 4 MiB message is 1024 READs, twice a QP's send queue (512), so the
    // receiver must reap its own (unsolicited) READ completions to post the rest; the sender
    // says nothing until the READ is done.
    const { ch, far } = await pair(policy, { readChunkBytes: 4096 }, { readChunkBytes: 4096 });
    const size = 4 << 20;
    const payload = new Uint8Array(size);
    for (let i = 0; i < size; i += 4096) payload[i] = (i >>> 12) & 0xff;
    const sending = ch.send(payload, { timeoutMs: 20_000 });
    using m = await far.receive({ timeoutMs: 20_000 });
    await sending;
    expect(m.length).toBe(size);
    for (let i = 0; i < size; i += 4096) expect(m.bytes[i]).toBe((i >>> 12) & 0xff);
    expect((far.connection as RdmaConnection).stats().rendezvousReceived).toBe(1);
  });
}

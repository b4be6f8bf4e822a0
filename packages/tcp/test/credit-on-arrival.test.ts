// Credit owed from released messages goes back at once when an arriving message fills the
// peer's view of the window past half, not when the flush delay ends (review L2 of session
// 20: the PS runs its transports with a 100 ms delay, and a sender whose next message fits
// only once that credit returns waited out the timer). A delay of a minute here: the send
// either completes because the credit came back, or times out.
import type { Channel, Connection, InboundMessage } from '@rdmajs/mux';
import { afterEach, expect, it } from 'vitest';
import { TcpTransport } from '../src/index.js';

const SECRET = 'credit on arrival test secret, 32+ bytes';
const KiB = 1024;
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

it('credit owed goes back when an arrival fills the window past half, not after the flush delay', async () => {
  const limits = { windowBytes: 1024 * KiB, maxMessageBytes: 900 * KiB };
  const listener = await new TcpTransport({ ...limits, creditFlushMs: 60_000 }).listen({
    secret: SECRET,
  });
  cleanups.push(() => listener.close());
  const accepted = new Promise<Channel>((resolve) =>
    listener.once('connection', (c: Connection) => c.once('channel', resolve)),
  );
  const conn = await new TcpTransport(limits).connect({ port: listener.port, secret: SECRET });
  cleanups.push(() => conn.destroy());
  const ch = conn.openChannel('hold');
  await ch.send(new Uint8Array(64 * KiB)); // A: released at once, its credit owed (below every threshold)
  const rc = await accepted;
  const held: InboundMessage[] = [];
  const sizes: number[] = [];
  rc.listen(
    (m) => {
      sizes.push(m.bytes.length);
      if (sizes.length === 1) m.release();
      else held.push(m); // B and C are held: only A's credit can make room for C
    },
    () => {},
  );
  // B fits beside A's unreturned 64 KiB; C fits only once A's credit is back
  // (64 + 600 + 400 KiB > the 1 MiB window).
  await ch.send(new Uint8Array(600 * KiB), { timeoutMs: 10_000 });
  await ch.send(new Uint8Array(400 * KiB), { timeoutMs: 10_000 });
  await expect.poll(() => sizes, { timeout: 10_000 }).toEqual([64 * KiB, 600 * KiB, 400 * KiB]);
  for (const m of held) m.release();
});

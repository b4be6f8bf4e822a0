// The evaluation's ablations (RdmaTransport `ablations`, for measurement only): credits off
// (SENDs without credits, RNR retried forever by the NIC) and send window off. Both sides must
// agree; what switches off must really switch off, and nothing may be lost or reordered.

import { afterEach, expect, it } from 'vitest';
import {
  type Channel,
  type InboundMessage,
  type RdmaConnection,
  RdmaTransport,
  type RdmaTransportOptions,
} from '../src/index.js';
import { thrownCode } from './support/thrownCode.js';

const SECRET = 'rdma ablations test secret, 32+ bytes long';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Pair {
  server: RdmaTransport;
  client: RdmaTransport;
  conn: RdmaConnection;
  /** The client's channel and the server's end of it. */
  tx: Channel;
  rx: Channel;
}

/** A server transport listening and a client transport, in this process (closed after the test). */
async function transports(
  serverOptions: RdmaTransportOptions,
  clientOptions: RdmaTransportOptions,
) {
  const server = new RdmaTransport(serverOptions);
  const client = new RdmaTransport(clientOptions);
  const listener = await server.listen({ secret: SECRET });
  cleanups.push(async () => {
    await listener.close();
    client.close();
    server.close();
  });
  return { server, client, listener };
}

/** A client and a server transport in this process, one channel open between them. */
async function pair(
  serverOptions: RdmaTransportOptions,
  clientOptions: RdmaTransportOptions,
): Promise<Pair> {
  const { server, client, listener } = await transports(serverOptions, clientOptions);
  const rx = new Promise<Channel>((resolve) =>
    listener.on('connection', (c) => {
      c.on('error', () => {});
      c.on('channel', resolve);
    }),
  );
  const conn = await client.connect({ port: listener.port, secret: SECRET, timeoutMs: 10_000 });
  conn.on('error', () => {});
  const tx = conn.openChannel('ablation');
  return { server, client, conn, tx, rx: await rx };
}

/** A small fixed lease (no growth), the same in both credit tests. */
const LEASE: RdmaTransportOptions = { recvCredits: 8, recvBufferCount: 8 };

/** Message `i`: its index, then bytes derived from it (checked on arrival). */
function message(i: number, length: number): Uint8Array {
  const m = new Uint8Array(length);
  new DataView(m.buffer).setUint32(0, i);
  for (let k = 4; k < length; k++) m[k] = (i * 31 + k) & 0xff;
  return m;
}

function expectIntact(m: InboundMessage, i: number, length: number): void {
  expect(m.length).toBe(length);
  expect(Buffer.from(m.bytes).equals(Buffer.from(message(i, length)))).toBe(true);
}

/** Polls `cond` until it holds (bounded: fails the test after `timeoutMs`). */
async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`not reached within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

it('credits off: a receiver holding its buffers empties the shared queue, SENDs are RNR-retried, and every message arrives intact and in order once it releases', async () => {
  const N = 200;
  const SIZE = 512;
  const ablated: RdmaTransportOptions = {
    ablations: ['credits'],
    ...LEASE,
  };
  const p = await pair(ablated, ablated);
  const held: InboundMessage[] = [];
  let receiving = true;
  let failed: unknown;
  const reader = (async () => {
    try {
      while (receiving) held.push(await p.rx.receive({ timeoutMs: 30_000 }));
    } catch (err) {
      failed = err;
    }
  })();
  // Every send resolves at once (bytes copied into registered memory): none waits for a credit.
  for (let i = 0; i < N; i++) await p.tx.send(message(i, SIZE), { timeoutMs: 5_000 });
  const pool = () => p.server.stats().receivePool;
  // The slow receiver holds every buffer the pool posted: the queue ran dry ...
  await until(() => pool()?.posted === 0 && held.length === pool()?.held, 'receive queue dry');
  const dry = held.length;
  expect(dry).toBeLessThan(N);
  expect(pool()?.emptied).toBeGreaterThan(0);
  // ... and the rest are SENDs the sender's NIC has posted and retries (RNR), not lost ones.
  expect(p.conn.stats().outstandingWrs).toBeGreaterThan(0);
  expect(p.conn.stats().creditStalls).toBe(0);
  expect(held.length).toBe(dry);
  // The receiver releases: the buffers go back, the retried SENDs land, nothing is missing.
  const all: number[] = [];
  const drain = (): void => {
    for (const m of held.splice(0)) {
      all.push(new DataView(m.bytes.buffer, m.bytes.byteOffset).getUint32(0));
      expectIntact(m, all.length - 1, SIZE);
      m.release();
    }
  };
  while (all.length < N) {
    drain();
    await until(() => held.length > 0 || all.length === N || failed !== undefined, 'more arrivals');
    expect(failed).toBeUndefined();
  }
  receiving = false;
  expect(all).toEqual(Array.from({ length: N }, (_, i) => i));
  expect(p.conn.state).toBe('open');
  // rnrRetry 7: no SEND ever failed RNR_RETRY_EXC_ERR; no copies kept a buffer for the sender.
  expect(p.conn.stats().rnrCount).toBe(0);
  await p.conn.close({ timeoutMs: 10_000 });
  await reader;
});

// The smallest lease too: 4 buffers, one reserved for credit updates, so the copy-out mark
// must sit above the reserve (a quarter of 4 is the reserve itself, never reached).
it.each([
  ['8', LEASE],
  ['4', { recvCredits: 4, recvBufferCount: 4 }],
] as const)(
  'credits on (the full system), a lease of %s: the same slow receiver stalls the sender on credits, the queue never runs dry',
  async (_lease, full: RdmaTransportOptions) => {
    const N = 200;
    const SIZE = 512;
    const p = await pair(full, full);
    const held: InboundMessage[] = [];
    const sends = Array.from({ length: N }, (_, i) =>
      p.tx.send(message(i, SIZE), { timeoutMs: 20_000 }),
    );
    while (held.length < N) {
      const m = await p.rx.receive({ timeoutMs: 20_000 });
      expectIntact(m, held.length, SIZE);
      held.push(m);
    }
    await Promise.all(sends);
    // The receiver held every message: mux copied them out of their buffers so the sender's
    // credits came back; the sender waited for credits instead of finding no buffer.
    expect(p.conn.stats().creditStalls).toBeGreaterThan(0);
    expect(p.server.stats().receivePool?.emptied).toBe(0);
    for (const m of held) m.release();
    await p.conn.close({ timeoutMs: 10_000 });
  },
);

it('send window off: the sender passes the window the receiver announced, and the receiver does not fail it', async () => {
  const N = 64;
  const SIZE = 4096;
  // The smallest window a side may announce: 16 messages, 64 KiB (≈ 15 of these).
  const small: RdmaTransportOptions = {
    windowBytes: 64 * 1024,
    windowMessages: 16,
    maxMessageBytes: SIZE,
  };
  const p = await pair(
    { ...small, ablations: ['send-window'] },
    { ...small, ablations: ['send-window'] },
  );
  for (let i = 0; i < N; i++) await p.tx.send(message(i, SIZE), { timeoutMs: 5_000 });
  const held: InboundMessage[] = [];
  while (held.length < N) {
    const m = await p.rx.receive({ timeoutMs: 10_000 });
    expectIntact(m, held.length, SIZE);
    held.push(m);
  }
  // Four times the window is held unreleased, and the connection is fine.
  expect(p.conn.stats().windowStalls).toBe(0);
  expect(p.conn.state).toBe('open');
  for (const m of held) m.release();
  await p.conn.close({ timeoutMs: 10_000 });
});

it('send window on (the full system): the same sender waits at the announced window', async () => {
  const SIZE = 4096;
  const small: RdmaTransportOptions = {
    windowBytes: 64 * 1024,
    windowMessages: 16,
    maxMessageBytes: SIZE,
  };
  const p = await pair(small, small);
  let sent = 0;
  let err: unknown;
  for (let i = 0; i < 64 && err === undefined; i++) {
    await p.tx.send(message(i, SIZE), { timeoutMs: 300 }).then(
      () => {
        sent++;
      },
      (e: unknown) => {
        err = e;
      },
    );
  }
  expect(sent).toBe(15); // 64 KiB / (4 KiB + 16)
  expect(err).toMatchObject({ code: 'ERR_MUX_DEADLINE' });
  expect(p.conn.stats().windowStalls).toBeGreaterThan(0);
});

it('both sides must switch off the same lessons: a mismatch fails the connection with ERR_MUX_ABLATION on both sides', async () => {
  const cases: Array<[RdmaTransportOptions, RdmaTransportOptions]> = [
    [{ ablations: ['credits'] }, {}],
    [{}, { ablations: ['send-window'] }],
    [{ ablations: ['credits'] }, { ablations: ['credits', 'send-window'] }],
  ];
  for (const [serverOptions, clientOptions] of cases) {
    const { server, client, listener } = await transports(serverOptions, clientOptions);
    const rejected = new Promise<Error>((resolve) => listener.on('reject', resolve));
    await expect(
      client.connect({ port: listener.port, secret: SECRET, timeoutMs: 10_000 }),
    ).rejects.toMatchObject({ code: 'ERR_MUX_ABLATION' });
    await expect(rejected).resolves.toMatchObject({ code: 'ERR_MUX_ABLATION' });
    expect(server.stats().connections).toBe(0);
    expect(client.stats().connections).toBe(0);
  }
});

it('ablations are validated: unknown names and non-arrays throw ERR_MUX_INVALID_ARG', () => {
  expect(thrownCode(() => new RdmaTransport({ ablations: ['nope' as 'credits'] }))).toBe(
    'ERR_MUX_INVALID_ARG',
  );
  expect(
    thrownCode(() => new RdmaTransport({ ablations: 'credits' as unknown as ['credits'] })),
  ).toBe('ERR_MUX_INVALID_ARG');
});

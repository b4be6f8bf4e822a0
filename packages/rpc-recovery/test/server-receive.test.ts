// Payloads without copies: the server hands handlers a view of the transport's receive
// memory and releases it only after the reply went out (a reply that aliases its request
// arrives intact, with many calls and large rendezvous payloads in flight); the client sends
// allocator blocks as they are and `callView` leaves replies in the receive memory until
// released. Over TCP and over RDMA.

import { RdmaTransport } from '@rdmajs/mux';
import { afterEach, describe, expect, it } from 'vitest';
import { MethodRegistry, RpcClient, RpcError, RpcServer } from '../src/index.js';
import { makeTransport } from './support/transports.js';

const secret = 'rpc-server-receive-secret-0123456789';
const key = new Uint8Array(32).fill(3);
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.each(['tcp', 'rdma'] as const)('server receive over %s', (kind) => {
  it('a_reply_aliasing_its_request_payload_arrives_intact', async () => {
    const reg = new MethodRegistry();
    // Returns the request's own bytes, after a delay: they must stay valid until sent.
    reg.register(
      'echoView',
      async (p) => {
        await new Promise((r) => setTimeout(r, p[0] ?? 0));
        return p;
      },
      { idempotent: true },
    );
    const server = new RpcServer(reg, { key });
    const st = makeTransport(kind);
    cleanups.push(() => st.close?.());
    const listener = await st.listen({ secret });
    listener.on('connection', (c) => server.serve(c));
    cleanups.push(() => listener.close());
    const ct = makeTransport(kind);
    cleanups.push(() => ct.close?.());
    const client = await RpcClient.connect({ transport: ct, port: listener.port, secret });
    cleanups.push(() => client.close());
    const sizes = [1, 64, 4096, 9000, 100_000, 1 << 20];
    const calls = Array.from({ length: 120 }, (_, i) => {
      const p = new Uint8Array(sizes[i % sizes.length] as number);
      for (let j = 0; j < p.length; j++) p[j] = (i * 31 + j) & 0xff;
      p[0] = i % 7; // the handler's delay, ms
      return client
        .call('echoView', p, { idempotent: true, deadlineMs: 10_000 })
        .then((r) => expect(Buffer.from(r).equals(Buffer.from(p))).toBe(true));
    });
    await Promise.all(calls);
  });

  it('call_view_replies_stay_until_released_and_blocks_go_as_they_are', async () => {
    const reg = new MethodRegistry();
    reg.register('echoView', (p) => p, { idempotent: true });
    const server = new RpcServer(reg, { key });
    const st = makeTransport(kind);
    cleanups.push(() => st.close?.());
    const listener = await st.listen({ secret });
    listener.on('connection', (c) => server.serve(c));
    cleanups.push(() => listener.close());
    const ct = makeTransport(kind);
    cleanups.push(() => ct.close?.());
    const client = await RpcClient.connect({ transport: ct, port: listener.port, secret });
    cleanups.push(() => client.close());
    // Requests in registered memory over RDMA (gathered from the block), bytes over TCP.
    const payloads = [64, 4096, 100_000].map((n, i) => {
      const fill = (b: Uint8Array) => {
        for (let j = 0; j < b.length; j++) b[j] = (i + j) & 0xff;
        return b;
      };
      if (ct instanceof RdmaTransport) {
        const block = ct.allocator.alloc(n, 'remote-read');
        fill(block.bytes.subarray(0, n));
        cleanups.push(() => block.release());
        return { part: block.slice(0, n), bytes: Uint8Array.from(block.bytes.subarray(0, n)) };
      }
      const b = fill(new Uint8Array(n));
      return { part: b, bytes: b.slice() };
    });
    // Held replies: all alive at once, each its own bytes, then released.
    const replies = await Promise.all(
      payloads.map((p) => client.callView('echoView', p.part, { idempotent: true })),
    );
    replies.forEach((r, i) => {
      expect(Buffer.from(r.bytes).equals(Buffer.from(payloads[i]?.bytes as Uint8Array))).toBe(true);
    });
    for (const r of replies) r.release();
    expect(() => replies[0]?.bytes).toThrow(RpcError);
    replies[0]?.release(); // idempotent
    // Released buffers are reused: calls keep going.
    for (let i = 0; i < 300; i++) {
      using r = await client.callView('echoView', new Uint8Array([i & 0xff]), { idempotent: true });
      expect(r.bytes[0]).toBe(i & 0xff);
    }
  });
});

// The server hands handlers a view of the transport's receive memory (no copy) and releases
// it only after the reply went out: a reply that aliases its request arrives intact, over
// TCP and over RDMA, with many calls and large (rendezvous) payloads in flight.
import { afterEach, describe, expect, it } from 'vitest';
import { MethodRegistry, RpcClient, RpcServer } from '../src/index.js';
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
});

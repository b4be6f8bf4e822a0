import { TcpTransport } from '@rdmajs/tcp';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MethodRegistry, RpcClient, RpcServer, type RpcServerOptions } from '../src/index.js';

// The server's bound on calls executing at once (per connection and in total): a client that
// floods calls is backpressured, never refused, so every call still runs exactly once.

const secret = 'rpc-concurrency-test-secret-0123456789ab';
const key = new Uint8Array(32).fill(9);
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A non-idempotent counter whose handlers all wait on one gate, counting how many run at once. */
function gatedCounter() {
  let open!: () => void;
  const gate = new Promise<void>((r) => {
    open = r;
  });
  const seen = { running: 0, maxRunning: 0, count: 0 };
  const reg = new MethodRegistry();
  reg.register('inc', async () => {
    seen.running++;
    seen.maxRunning = Math.max(seen.maxRunning, seen.running);
    await gate;
    await new Promise((r) => setImmediate(r)); // stay async after the gate too
    seen.running--;
    const out = new Uint8Array(4);
    new DataView(out.buffer).setUint32(0, ++seen.count);
    return out;
  });
  reg.register('echo', (p) => p, { idempotent: true });
  return { reg, seen, open };
}

async function serve(reg: MethodRegistry, options: Omit<RpcServerOptions, 'key'>) {
  const transport = new TcpTransport();
  const listener = await transport.listen({ secret });
  const server = new RpcServer(reg, { key, ...options });
  listener.on('connection', (c) => server.serve(c));
  cleanups.push(() => listener.close());
  const connect = async (extra: Partial<Parameters<typeof RpcClient.connect>[0]> = {}) => {
    const client = await RpcClient.connect({ transport, port: listener.port, secret, ...extra });
    cleanups.push(() => client.close());
    return client;
  };
  return { server, connect };
}

const counterOf = (b: Uint8Array): number => new DataView(b.buffer, b.byteOffset, 4).getUint32(0);

describe('RpcServer maxConcurrentRequests', () => {
  it('flooding_client_runs_at_most_the_bound_and_every_call_completes_once', async () => {
    const { reg, seen, open } = gatedCounter();
    const { server, connect } = await serve(reg, { maxConcurrentRequests: 4 });
    const client = await connect();
    const calls = Array.from({ length: 300 }, () =>
      client.call('inc', new Uint8Array(0), { deadlineMs: 60_000 }),
    );
    await vi.waitFor(() => expect(server.stats().throttled).toBeGreaterThan(0), {
      timeout: 20_000,
    });
    expect(server.stats().running).toBe(4);
    expect(seen.running).toBe(4);
    open();
    const values = (await Promise.all(calls)).map(counterOf);
    expect(seen.maxRunning).toBe(4);
    expect(seen.count).toBe(300); // each ran once
    expect(new Set(values).size).toBe(300);
    expect(Math.max(...values)).toBe(300);
    await vi.waitFor(() => expect(server.stats().running).toBe(0));
  }, 60_000);

  it('server_total_bound_is_shared_by_connections', async () => {
    const { reg, seen, open } = gatedCounter();
    const { server, connect } = await serve(reg, {
      maxConcurrentRequests: 4,
      maxConcurrentRequestsTotal: 6,
    });
    const a = await connect();
    const b = await connect();
    const calls = [a, b].flatMap((c) =>
      Array.from({ length: 100 }, () => c.call('inc', new Uint8Array(0), { deadlineMs: 60_000 })),
    );
    await vi.waitFor(
      () => {
        expect(server.stats().running).toBe(6);
        expect(server.stats().throttled).toBeGreaterThan(0);
      },
      { timeout: 20_000 },
    );
    expect(seen.running).toBe(6);
    open();
    await Promise.all(calls);
    expect(seen.maxRunning).toBe(6);
    expect(seen.count).toBe(200);
    await vi.waitFor(() => expect(server.stats().running).toBe(0));
  }, 60_000);

  it('call_waiting_for_a_slot_fails_typed_at_its_deadline_and_heartbeats_go_on', async () => {
    const { reg, seen, open } = gatedCounter();
    const { server, connect } = await serve(reg, { maxConcurrentRequests: 1 });
    const client = await connect({ heartbeatIntervalMs: 50, heartbeatMisses: 2 });
    const held = client.call('inc', new Uint8Array(0), { deadlineMs: 60_000 });
    await vi.waitFor(() => expect(seen.running).toBe(1));
    // Waits behind the held call, past several heartbeat timeouts' worth of time.
    await expect(
      client.call('echo', new Uint8Array([1]), { deadlineMs: 400 }),
    ).rejects.toMatchObject({ code: 'ERR_RPC_DEADLINE' });
    expect(server.stats().throttled).toBeGreaterThan(0);
    expect(client.session.state).toBe('connected');
    expect(client.stats().reconnects).toBe(0);
    open();
    expect(counterOf(await held)).toBe(1);
    expect([...(await client.call('echo', new Uint8Array([7])))]).toEqual([7]);
  }, 30_000);

  it('call_that_waited_its_whole_budget_for_a_slot_is_dropped_unexecuted_and_the_channel_goes_on', async () => {
    const { reg, seen, open } = gatedCounter();
    let marks = 0;
    reg.register('mark', () => {
      marks++;
      return Uint8Array.of(marks);
    });
    const { server, connect } = await serve(reg, { maxConcurrentRequests: 1 });
    const client = await connect();
    const held = client.call('inc', new Uint8Array(0), { deadlineMs: 60_000 });
    await vi.waitFor(() => expect(seen.running).toBe(1));
    // One wait, bounded by the call's own budget (not by the connection's life): its caller
    // gives up, and the server drops it then rather than run it once a slot frees.
    await expect(client.call('mark', new Uint8Array(0), { deadlineMs: 300 })).rejects.toMatchObject(
      { code: 'ERR_RPC_DEADLINE' },
    );
    await vi.waitFor(() => expect(server.stats().expired).toBe(1), { timeout: 10_000 });
    expect(server.stats().running).toBe(1);
    open();
    expect(counterOf(await held)).toBe(1);
    // The channel serves on; the dropped call never ran.
    expect([...(await client.call('mark', new Uint8Array(0)))]).toEqual([1]);
    expect(marks).toBe(1);
    await vi.waitFor(() => expect(server.stats().running).toBe(0));
  }, 30_000);

  it('connection_closed_while_waiting_gives_every_slot_back', async () => {
    const { reg, seen, open } = gatedCounter();
    const { server, connect } = await serve(reg, {
      maxConcurrentRequests: 2,
      maxConcurrentRequestsTotal: 2,
    });
    const client = await connect();
    const calls = Array.from({ length: 10 }, () =>
      client.call('inc', new Uint8Array(0), { deadlineMs: 60_000 }).catch((e: unknown) => e),
    );
    await vi.waitFor(() => expect(server.stats().throttled).toBeGreaterThan(0), {
      timeout: 20_000,
    });
    await client.close();
    for (const r of await Promise.all(calls)) expect(r).toMatchObject({ code: 'ERR_RPC_CLOSED' });
    await vi.waitFor(() => expect(server.stats().connections).toBe(0));
    open(); // the two handlers still running finish; their slots come back
    await vi.waitFor(() => expect(server.stats().running).toBe(0));
    expect(seen.count).toBe(2);
    // The whole total is free again for the next client.
    const next = await connect();
    const again = Array.from({ length: 5 }, () => next.call('inc', new Uint8Array(0)));
    expect((await Promise.all(again)).map(counterOf).sort((x, y) => x - y)).toEqual([
      3, 4, 5, 6, 7,
    ]);
  }, 30_000);

  it('bad_bounds_are_refused_typed', () => {
    const reg = new MethodRegistry();
    for (const bad of [
      { maxConcurrentRequests: 0 },
      { maxConcurrentRequests: 1.5 },
      { maxConcurrentRequests: 8, maxConcurrentRequestsTotal: 4 },
      { maxConcurrentRequestsTotal: 2 ** 40 },
    ]) {
      expect(() => new RpcServer(reg, { key, ...bad })).toThrow(
        expect.objectContaining({ code: 'ERR_RPC_INVALID_ARG' }),
      );
    }
  });
});

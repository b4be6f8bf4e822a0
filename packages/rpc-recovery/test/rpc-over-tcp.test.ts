import { TcpTransport } from '@rdmajs/tcp';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DeduplicationTable,
  ExponentialBackoff,
  isRefusedConnect,
  MethodRegistry,
  RemoteError,
  RpcClient,
  RpcError,
  RpcServer,
} from '../src/index.js';

const secret = 'rpc-test-secret-0123456789-abcdefghijklmnop';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const key = new Uint8Array(32).fill(7);

async function pair(registry: MethodRegistry, dedup?: DeduplicationTable) {
  const transport = new TcpTransport();
  const listener = await transport.listen({ secret });
  const server = new RpcServer(registry, dedup === undefined ? { key } : { key, dedup });
  listener.on('connection', (c) => server.serve(c));
  const client = await RpcClient.connect({ transport, port: listener.port, secret });
  cleanups.push(async () => {
    await client.close();
    await listener.close();
  });
  return client;
}

describe('RpcClient and RpcServer over TcpTransport', () => {
  it('call_returns_handler_bytes', async () => {
    const reg = new MethodRegistry();
    reg.register('echo', (p) => p.slice().reverse());
    const client = await pair(reg);
    const out = await client.call('echo', new Uint8Array([1, 2, 3]));
    expect([...out]).toEqual([3, 2, 1]);
  });

  it('remote_error_code_and_message_reach_caller', async () => {
    const reg = new MethodRegistry();
    reg.register('fail', () => {
      throw Object.assign(new Error('no such key'), { code: 'ERR_PS_NO_KEY' });
    });
    const client = await pair(reg);
    const err = await client.call('fail', new Uint8Array(0)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RemoteError);
    expect(err).toMatchObject({
      code: 'ERR_RPC_REMOTE',
      remoteCode: 'ERR_PS_NO_KEY',
      outcome: 'error',
    });
    expect((err as Error).message).toBe('no such key');
  });

  it('call_past_deadline_fails_typed', async () => {
    const reg = new MethodRegistry();
    reg.register('never', () => new Promise<Uint8Array>(() => {}));
    const client = await pair(reg);
    await expect(client.call('never', new Uint8Array(0), { deadlineMs: 50 })).rejects.toMatchObject(
      {
        code: 'ERR_RPC_DEADLINE',
      },
    );
  });

  it('aborted_call_fails_typed', async () => {
    const reg = new MethodRegistry();
    reg.register('never', () => new Promise<Uint8Array>(() => {}));
    const client = await pair(reg);
    const ac = new AbortController();
    const p = client.call('never', new Uint8Array(0), { signal: ac.signal });
    ac.abort();
    await expect(p).rejects.toMatchObject({ code: 'ERR_RPC_ABORTED' });
  });

  it('close_fails_pending_calls_typed', async () => {
    const reg = new MethodRegistry();
    reg.register('never', () => new Promise<Uint8Array>(() => {}));
    const client = await pair(reg);
    const p = client.call('never', new Uint8Array(0));
    await client.close();
    const err = await p.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RpcError);
    expect(err).toMatchObject({ code: 'ERR_RPC_CLOSED' });
  });

  it('many_concurrent_calls_each_get_their_own_reply', async () => {
    const reg = new MethodRegistry();
    reg.register('double', (p) => new Uint8Array([(p[0] ?? 0) * 2]));
    const client = await pair(reg);
    const replies = await Promise.all(
      Array.from({ length: 100 }, (_, i) => client.call('double', new Uint8Array([i]))),
    );
    for (const [i, r] of replies.entries()) expect(r[0]).toBe((i * 2) & 0xff);
  });

  it('deduplicating_server_runs_each_distinct_non_idempotent_call', async () => {
    const reg = new MethodRegistry();
    let count = 0;
    reg.register('inc', () => new Uint8Array([++count]));
    const dedup = new DeduplicationTable();
    const client = await pair(reg, dedup);
    const a = await client.call('inc', new Uint8Array(0));
    const b = await client.call('inc', new Uint8Array(0));
    expect([a[0], b[0]]).toEqual([1, 2]);
    expect(count).toBe(2);
    expect(dedup.sessionIds()).toEqual([client.session.sessionId]);
  });

  it('session_is_opened_at_connect_with_epoch_1', async () => {
    const reg = new MethodRegistry();
    reg.register('echo', (p) => p, { idempotent: true });
    const client = await pair(reg);
    expect(client.session.state).toBe('connected');
    expect(client.session.sessionId).toMatch(/^[0-9a-f]{32}$/);
    expect(client.session.epoch).toBe(1);
  });

  it('closed_client_ends_its_session_on_the_server', async () => {
    const reg = new MethodRegistry();
    reg.register('inc', () => new Uint8Array([1]));
    const dedup = new DeduplicationTable();
    const client = await pair(reg, dedup);
    await client.call('inc', new Uint8Array(0));
    await client.close();
    await expect(client.call('inc', new Uint8Array(0))).rejects.toMatchObject({
      code: 'ERR_RPC_CLOSED',
    });
    for (let i = 0; i < 100 && dedup.sessionIds().length > 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(dedup.sessionIds()).toEqual([]);
    expect(client.session.state).toBe('closed');
  });

  it('calls_made_while_recovering_wait_and_go_out_on_the_new_connection', async () => {
    const transport = new TcpTransport();
    const reg = new MethodRegistry();
    reg.register('echo', (p) => p.slice(), { idempotent: true });
    const server = new RpcServer(reg, { key });
    const listener = await transport.listen({ secret });
    const conns: import('@rdmajs/mux').Connection[] = [];
    listener.on('connection', (c) => {
      conns.push(c);
      server.serve(c);
    });
    const client = await RpcClient.connect({ transport, port: listener.port, secret });
    cleanups.push(async () => {
      await client.close();
      await listener.close();
    });
    const recovering = new Promise((r) => client.session.once('recovering', r));
    conns[0]?.destroy();
    await recovering;
    const out = await client.call('echo', new Uint8Array([9]), { idempotent: true });
    expect([...out]).toEqual([9]);
    expect(client.stats()).toMatchObject({ state: 'connected', epoch: 2, replayed: 0 });
  });

  it('too_many_pending_calls_are_refused_typed', async () => {
    const reg = new MethodRegistry();
    reg.register('never', () => new Promise<Uint8Array>(() => {}), { idempotent: true });
    const transport = new TcpTransport();
    const server = new RpcServer(reg, { key });
    const listener = await transport.listen({ secret });
    listener.on('connection', (c) => server.serve(c));
    const client = await RpcClient.connect({
      transport,
      port: listener.port,
      secret,
      maxPendingCalls: 2,
    });
    cleanups.push(async () => {
      await client.close();
      await listener.close();
    });
    const held = [1, 2].map(() =>
      client.call('never', new Uint8Array(0), { idempotent: true }).catch((e: unknown) => e),
    );
    await expect(
      client.call('never', new Uint8Array(0), { idempotent: true }),
    ).rejects.toMatchObject({ code: 'ERR_RPC_OVERLOADED', retryable: true });
    await client.close();
    for (const p of held) expect(await p).toMatchObject({ code: 'ERR_RPC_CLOSED' });
  });

  it('connect_to_nobody_gives_up_typed_when_the_backoff_does', async () => {
    const transport = new TcpTransport();
    const listener = await transport.listen({ secret });
    const port = listener.port;
    await listener.close();
    const err = await RpcClient.connect({
      transport,
      port,
      secret,
      backoff: new ExponentialBackoff({ baseMs: 1, capMs: 5, maxAttempts: 3 }),
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
  });

  it('reconnect_policy_is_told_the_restarting_server_refused', async () => {
    const transport = new TcpTransport();
    const listener = await transport.listen({ secret });
    const port = listener.port;
    await listener.close();
    const failures: unknown[] = [];
    const err = await RpcClient.connect({
      transport,
      port,
      secret,
      backoff: {
        nextDelay: (attempt, _elapsed, failure) => {
          failures.push(failure);
          return attempt < 3 ? 1 : null;
        },
      },
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
    expect(failures).toHaveLength(3);
    for (const f of failures) expect(isRefusedConnect(f)).toBe(true);
    // The default policy therefore retries a refused port within refusedCapMs.
    const d = new ExponentialBackoff().nextDelay(20, 5_000, failures[0]);
    expect(d).toBeLessThan(50);
  });

  it('bad_connect_options_fail_at_once_without_retrying', async () => {
    const err = await RpcClient.connect({
      transport: new TcpTransport(),
      port: 70_000,
      secret,
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_MUX_INVALID_ARG' });
  });
});

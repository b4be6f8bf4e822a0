// RDMA → TCP fallback per connection, and back to RDMA when a probe succeeds; real
// processes on the soft provider. Calls succeed exactly once across the switches.
import diagnostics_channel from 'node:diagnostics_channel';
import { RdmaTransport } from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';
import { openDevice } from '@rdmajs/verbs';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DIAGNOSTICS_CHANNELS,
  ExponentialBackoff,
  RpcClient,
  type RpcClientOptions,
  type TransportChange,
} from '../src/index.js';
import { counterService } from './fixtures/counter-service.js';
import { type Peer, spawnServer } from './support/spawn.js';

const secret = 'rpc-fallback-secret-0123456789-abcdefghijklmnop';
const keyHex = '33'.repeat(32);
const key = new Uint8Array(Buffer.from(keyHex, 'hex'));
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const readU32 = (b: Uint8Array): number => new DataView(b.buffer, b.byteOffset, 4).getUint32(0);

async function rdmaServer(refuseRdma: boolean): Promise<Peer> {
  const peer = await spawnServer({
    port: 0,
    secret,
    key: keyHex,
    transport: 'rdma',
    tcpPort: 0,
    refuseRdma,
  });
  cleanups.push(() => peer.kill());
  return peer;
}

function rdma(options: ConstructorParameters<typeof RdmaTransport>[0] = {}): RdmaTransport {
  const t = new RdmaTransport({ peerTimeoutMs: 60_000, recvBufferCount: 64, ...options });
  cleanups.push(() => t.close());
  return t;
}

async function client(
  port: number,
  extra: Partial<RpcClientOptions>,
  events: TransportChange[] = [],
): Promise<RpcClient> {
  const c = new RpcClient({
    transport: rdma(),
    port,
    secret,
    heartbeatIntervalMs: 100,
    heartbeatMisses: 5,
    connectTimeoutMs: 2000,
    backoff: new ExponentialBackoff({ baseMs: 20, capMs: 200, deadlineMs: 10_000 }),
    ...extra,
  });
  c.on('transport', (e) => events.push(e));
  cleanups.push(() => c.close());
  await c.ready();
  return c;
}

function published(): TransportChange[] {
  const seen: TransportChange[] = [];
  const on = (m: unknown): void => {
    seen.push(m as TransportChange);
  };
  diagnostics_channel.subscribe(DIAGNOSTICS_CHANNELS.transport, on);
  cleanups.push(() => {
    diagnostics_channel.unsubscribe(DIAGNOSTICS_CHANNELS.transport, on);
  });
  return seen;
}

/** `n` increments, 16 at a time; returns the replies' values. */
async function increments(c: RpcClient, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i += 16) {
    const batch = Array.from({ length: Math.min(16, n - i) }, () =>
      c.call('inc', new Uint8Array(0), { deadlineMs: 20_000 }),
    );
    for (const r of await Promise.all(batch)) out.push(readU32(r));
  }
  return out;
}

describe('fallback to TCP', () => {
  it('rdma_refused_by_the_server_falls_back_to_tcp_calls_run_exactly_once', async () => {
    const s = await rdmaServer(true); // its QPs fail to come up: RDMA setup fails
    const seen = published();
    const events: TransportChange[] = [];
    const c = await client(
      s.port,
      {
        fallback: { transport: new TcpTransport(), port: s.tcpPort as number, probeIntervalMs: 0 },
      },
      events,
    );
    const values = await increments(c, 200);
    expect(new Set(values).size).toBe(200);
    expect(Math.max(...values)).toBe(200);
    expect(await s.ask('count')).toBe(200);
    expect(c.stats()).toMatchObject({ transport: 'tcp', onFallback: true, fallbacks: 1 });
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ from: undefined, to: 'tcp', fallback: true });
    expect(events[0]?.reason).toBeInstanceOf(Error);
    expect(seen).toEqual(events);
  });

  it('fallback_is_off_by_default_and_the_session_fails_typed', async () => {
    const s = await rdmaServer(true);
    const err = await RpcClient.connect({
      transport: rdma(),
      port: s.port,
      secret,
      connectTimeoutMs: 2000,
      backoff: new ExponentialBackoff({ baseMs: 10, capMs: 20, maxAttempts: 2 }),
    }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
    expect(await s.ask('count')).toBe(0);
  });

  it('no_rdma_device_falls_back_to_tcp', async () => {
    const s = await rdmaServer(false);
    const device = openDevice({ provider: 'soft' });
    device.close(); // a device that is gone: the transport cannot open a PD on it
    const t = new RdmaTransport({ device });
    const c = await client(s.port, {
      transport: t,
      fallback: { transport: new TcpTransport(), port: s.tcpPort as number, probeIntervalMs: 0 },
    });
    expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(1);
    expect(c.stats()).toMatchObject({ transport: 'tcp', onFallback: true });
  });

  it('peer_without_rdma_falls_back_on_the_same_port', async () => {
    const svc = counterService({ key });
    const listener = await new TcpTransport({ peerTimeoutMs: 60_000 }).listen({ secret });
    listener.on('connection', (conn) => svc.server.serve(conn));
    cleanups.push(() => listener.close());
    // The RDMA client meets a TCP-only listener: refused at HELLO (ERR_MUX_TRANSPORT, the
    // handshake names the transport), then falls back to TCP on the same port.
    const c = await client(listener.port, {
      fallback: { transport: new TcpTransport(), probeIntervalMs: 0 },
    });
    expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(1);
    expect(svc.count()).toBe(1);
    expect(c.stats()).toMatchObject({ transport: 'tcp', onFallback: true });
  });

  it('moves_back_to_rdma_when_a_probe_succeeds_with_calls_in_flight', async () => {
    const s = await rdmaServer(true);
    const events: TransportChange[] = [];
    const c = await client(
      s.port,
      {
        fallback: {
          transport: new TcpTransport(),
          port: s.tcpPort as number,
          probeIntervalMs: 100,
        },
      },
      events,
    );
    expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(1);
    // Probes fail while the server still refuses RDMA.
    for (let i = 0; i < 500 && c.stats().probeFailures === 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(c.stats().probeFailures).toBeGreaterThan(0);
    const back = new Promise<TransportChange>((resolve) =>
      c.on('transport', (e) => {
        if (!e.fallback) resolve(e);
      }),
    );
    await s.ask('accept-rdma');
    // Calls keep running while the session moves: each runs once.
    const during = increments(c, 160);
    const change = await back;
    expect(change).toMatchObject({ from: 'tcp', to: 'rdma', fallback: false, reason: undefined });
    const values = await during;
    expect(new Set(values).size).toBe(160);
    expect(await s.ask('count')).toBe(161);
    expect(c.stats()).toMatchObject({ transport: 'rdma', onFallback: false, switchedBack: 1 });
    expect(events.map((e) => e.to)).toEqual(['tcp', 'rdma']);
    expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(162);
  });
});

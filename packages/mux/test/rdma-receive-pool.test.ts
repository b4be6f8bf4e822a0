// The shared receive pool (issue 11): every connection of a transport receives from one SRQ,
// each peer's credits are a lease from it (16 at the handshake, more while busy, back after
// `leaseIdleMs` idle), so a transport serves many peers within its registration limit. Real
// processes where the many peers are; both ends in this process (two soft devices) where the
// test reads both sides' leases.
import { afterEach, describe, expect, it } from 'vitest';
import {
  type InboundMessage,
  type RdmaConnection,
  RdmaTransport,
  type RdmaTransportOptions,
} from '../src/index.js';
import { spawnContractPeer } from './contract/spawnPeer.js';
import { rdmaTarget } from './rdmaTarget.js';
import { rdmaPair } from './support/rdmaPair.js';
import { roguePeer } from './support/roguePeer.js';

const SECRET = 'rdma receive pool test secret (test only)';
const LONG = { timeoutMs: 120_000 };
const MiB = 1024 * 1024;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** An echo server and a client transport in this process; `hold` keeps what arrives instead. */
const pair = (options: RdmaTransportOptions = {}, hold?: InboundMessage[]) =>
  rdmaPair(cleanups, { secret: SECRET, options, ...(hold === undefined ? {} : { hold }) });

describe('RdmaTransport shared receive pool', () => {
  it('a_thousand_connections_to_a_forked_peer_fit_the_default_registration_limit', async () => {
    const N = Number(process.env.MUX_POOL_CONNECTIONS ?? 1000);
    const peer = await spawnContractPeer(rdmaTarget.peerScript, SECRET);
    cleanups.push(() => peer.kill());
    const client = new RdmaTransport(); // defaults: 1 GiB, 16 credits per peer
    cleanups.push(() => client.close());
    const conns: RdmaConnection[] = [];
    cleanups.push(() => {
      for (const c of conns) c.destroy();
    });
    // In batches: the peer admits a bounded number of handshakes at once.
    for (let i = 0; i < N; i += 50) {
      const batch = Array.from({ length: Math.min(50, N - i) }, () =>
        client.connect({ port: peer.port, secret: SECRET, timeoutMs: 120_000 }),
      );
      conns.push(...(await Promise.all(batch)));
    }
    expect(conns.length).toBe(N);
    // Every connection carries a round trip (its first SEND finds its lease posted).
    for (let i = 0; i < N; i += 100) {
      await Promise.all(
        conns.slice(i, i + 100).map(async (c, k) => {
          const ch = c.openChannel('echo');
          const msg = new Uint8Array(1000).fill((i + k) & 0xff);
          await ch.send(msg, LONG);
          const m = await ch.receive(LONG);
          expect(m.bytes).toEqual(msg);
          m.release();
        }),
      );
    }
    const pool = client.stats().receivePool;
    if (pool === undefined) throw new Error('no pool');
    expect(pool.leased).toBe(16 * N);
    expect(pool.buffers).toBeGreaterThanOrEqual(pool.leased);
    const registered = client.allocator.stats().registeredBytes;
    expect(registered).toBeLessThanOrEqual(1024 * MiB);
    // Per connection: its lease of receive buffers plus its share of send slots and arenas.
    const perConnection = registered / N;
    expect(perConnection).toBeLessThan(1.5 * MiB);
    console.log(
      `${N} connections: ${(registered / MiB).toFixed(0)} MiB registered, ` +
        `${(perConnection / 1024).toFixed(0)} KiB per connection; pool ${pool.buffers} buffers ` +
        `(${(pool.registeredBytes / MiB).toFixed(0)} MiB), ${pool.posted} posted, ${pool.leased} leased`,
    );
    for (const c of conns) {
      expect(c.stats().rnrCount).toBe(0);
      expect(c.stats().recvLease).toBe(16);
    }
    // Closing them gives every lease back, and an idle transport its receive memory.
    await Promise.all(conns.splice(0).map((c) => c.close(LONG)));
    const after = client.stats().receivePool;
    expect(after?.leased).toBe(0);
    expect(after?.buffers).toBe(0);
  }, 600_000);

  it('a_busy_connection_leases_more_credits_and_gives_them_back_when_idle', async () => {
    const { conn, serverConns, server } = await pair({
      leaseIdleMs: 100,
      heartbeatIntervalMs: 40,
      peerTimeoutMs: 5_000,
    });
    const ch = conn.openChannel('stream');
    // Many messages in flight at once: the echo server's peer (this client) runs low on the
    // server's credits, so the server grows the client's lease (and the reverse).
    const payload = new Uint8Array(4096).fill(3);
    const received: Promise<void>[] = [];
    for (let round = 0; round < 4; round++) {
      const sends = Array.from({ length: 200 }, () => ch.send(payload, LONG));
      for (let i = 0; i < 200; i++) {
        received.push(
          ch.receive(LONG).then((m) => {
            expect(m.length).toBe(4096);
            m.release();
          }),
        );
      }
      await Promise.all(sends);
      await Promise.all(received.splice(0));
    }
    const sc = serverConns[0] as RdmaConnection;
    const grown = sc.stats().recvLease;
    expect(grown).toBeGreaterThan(16);
    expect(grown).toBeLessThanOrEqual(256);
    // The server may still owe the credit of the buffer of the client's last credit-only
    // update (it waits for a message, never for the flush delay): the lease seen here lags by it.
    expect(conn.stats().sendLease).toBeGreaterThanOrEqual(grown - 1);
    expect(conn.stats().sendLease).toBeLessThanOrEqual(grown);
    expect(server.stats().receivePool?.leased).toBe(grown);
    expect(conn.stats().rnrCount).toBe(0);
    expect(sc.stats().rnrCount).toBe(0);
    // Idle: the client gives the extra back (LeaseReturn), the server's pool shrinks its lease.
    // A lease the client could not see whole (credits still owed to it when it gave back)
    // is settled by the server's update once the client is quiet: exact, both ways.
    await expect.poll(() => sc.stats().recvLease, { timeout: 20_000 }).toBe(16);
    await expect.poll(() => conn.stats().sendLease, { timeout: 5_000 }).toBe(16);
    await expect.poll(() => conn.stats().recvLease, { timeout: 5_000 }).toBe(16);
    expect(sc.stats().sendLease).toBe(16);
    expect(server.stats().receivePool?.leased).toBe(16);
    // And the connection still works at its initial lease.
    await ch.send(payload, LONG);
    (await ch.receive(LONG)).release();
  }, 120_000);

  it('an_idle_connection_gives_back_the_send_slots_a_burst_of_channels_needed', async () => {
    // A fixed lease (16 buffers each way): only send slots change what the allocators hold.
    const { conn, client } = await pair({
      recvBufferCount: 16,
      leaseIdleMs: 100,
      heartbeatIntervalMs: 40,
      peerTimeoutMs: 5_000,
    });
    const chs = Array.from({ length: 1024 }, () => conn.openChannel('burst'));
    const payload = new Uint8Array(64).fill(5);
    // Every channel sends at once: about 1 024 send slots in use, kept once they completed.
    await Promise.all(
      chs.map(async (ch) => {
        for (let i = 0; i < 3; i++) {
          await ch.send(payload, LONG);
          (await ch.receive(LONG)).release();
        }
      }),
    );
    const busy = client.allocator.stats().inUseBytes;
    // Idle for leaseIdleMs: the pool keeps 256 (a slot is at least 280 bytes).
    await expect
      .poll(() => client.allocator.stats().inUseBytes, { timeout: 20_000 })
      .toBeLessThan(busy - 500 * 280);
    // And the connection still works on every channel.
    await Promise.all(
      chs.map(async (ch) => {
        await ch.send(payload, LONG);
        (await ch.receive(LONG)).release();
      }),
    );
  }, 120_000);

  it('a_slow_receiver_stops_its_sender_without_RNR_and_its_lease_stays_bounded', async () => {
    const held: InboundMessage[] = [];
    const { conn, serverConns, server } = await pair(
      { windowMessages: 2_000, recvBufferCount: 64 },
      held,
    );
    const ch = conn.openChannel('slow');
    const payload = new Uint8Array(1024).fill(9);
    const sends = Array.from({ length: 3_000 }, () => ch.send(payload, LONG).then(() => 1));
    // The receiver holds everything: the window (2 000 messages) stops the sender.
    await expect.poll(() => held.length, { timeout: 60_000 }).toBe(2_000);
    const sc = serverConns[0] as RdmaConnection;
    expect(conn.stats().windowStalls).toBeGreaterThan(0);
    expect(sc.stats().recvLease).toBeLessThanOrEqual(64);
    const pool = server.stats().receivePool;
    // Held messages beyond the lease were copied out of their buffers: the pool stayed small.
    expect(pool?.held ?? 0).toBeLessThanOrEqual(64);
    expect(pool?.buffers ?? 0).toBeLessThanOrEqual(64 + 2 * 32 + 32);
    expect(sc.stats().receiveCopies).toBeGreaterThan(0);
    // Released: the rest arrives, no RNR anywhere.
    for (const m of held.splice(0)) m.release();
    await expect.poll(() => held.length, { timeout: 60_000 }).toBe(1_000);
    for (const m of held.splice(0)) m.release();
    expect((await Promise.all(sends)).length).toBe(3_000);
    expect(conn.stats().rnrCount).toBe(0);
    expect(sc.stats().rnrCount).toBe(0);
  }, 180_000);

  it('closing_connections_returns_their_leases_and_others_keep_theirs', async () => {
    const { conn, client, listener, server } = await pair();
    const other = await client.connect({ port: listener.port, secret: SECRET });
    cleanups.push(() => other.destroy());
    expect(server.stats().receivePool?.leased).toBe(32);
    expect(client.stats().receivePool?.leased).toBe(32);
    // Receive buffers are local-only memory: no remote key ever reaches them.
    const bufferBytes = server.stats().receivePool?.bufferBytes;
    const buffers = server.allocator.leakReport().blocks.filter((b) => b.length === bufferBytes);
    expect(buffers.length).toBeGreaterThanOrEqual(32);
    for (const b of buffers) expect(b.access).toBe('local');
    await conn.close(LONG);
    await expect.poll(() => server.stats().receivePool?.leased).toBe(16);
    expect(client.stats().receivePool?.leased).toBe(16);
    const ch = other.openChannel('still');
    await ch.send(new Uint8Array([1, 2, 3]), LONG);
    const m = await ch.receive(LONG);
    expect([...m.bytes]).toEqual([1, 2, 3]);
    m.release();
    await other.close(LONG);
    await expect.poll(() => server.stats().receivePool?.buffers).toBe(0);
    expect(client.stats().receivePool?.buffers).toBe(0);
    expect(client.allocator.leakReport().blocks).toEqual([]);
  }, 60_000);

  it('buffers_the_application_holds_after_its_connection_ended_never_stand_for_a_new_lease', async () => {
    const held: InboundMessage[] = [];
    const { conn, client, listener, server } = await pair({}, held);
    const ch = conn.openChannel('held');
    // Enough that the lease grows and most of them stay in pool buffers (more than its slack).
    await Promise.all(
      Array.from({ length: 200 }, (_, i) => ch.send(new Uint8Array(2000).fill(i), LONG)),
    );
    await expect.poll(() => held.length).toBe(200);
    await conn.close(LONG);
    await expect.poll(() => server.stats().receivePool?.leased).toBe(0);
    const orphaned = server.stats().receivePool;
    expect(orphaned?.orphans).toBeGreaterThan(100);
    // A new peer's lease is posted in full, whatever the application still holds.
    const next = await client.connect({ port: listener.port, secret: SECRET });
    cleanups.push(() => next.destroy());
    const pool = server.stats().receivePool;
    if (pool === undefined) throw new Error('no pool');
    expect(pool.leased).toBe(16);
    expect(pool.posted).toBeGreaterThanOrEqual(pool.leased);
    const ch2 = next.openChannel('burst');
    await Promise.all(
      Array.from({ length: 15 }, (_, i) => ch2.send(new Uint8Array(10).fill(i), LONG)),
    );
    await expect.poll(() => held.length).toBe(215);
    for (const m of held.splice(0)) {
      expect(m.bytes.length).toBe(m.length);
      m.release();
    }
    expect(next.stats().rnrCount).toBe(0);
    expect(server.stats().receivePool?.orphans).toBe(0);
  }, 60_000);

  it('a_peer_sending_beyond_its_lease_fails_alone_and_the_pool_serves_the_others', async () => {
    const { conn, server, listener } = await pair();
    const errors: string[] = [];
    listener.on('connection', (c) =>
      c.on('error', (e) => errors.push((e as Error & { code: string }).code)),
    );
    const rogue = await roguePeer(listener.port, SECRET);
    cleanups.push(() => rogue.close());
    // Its lease is 16 (one reserved): it sends 24 SENDs without waiting for any credit.
    rogue.openMany(Array.from({ length: 24 }, (_, i) => 1 + 2 * i));
    await expect.poll(() => errors, { timeout: 10_000 }).toContain('ERR_MUX_PROTOCOL');
    // Its lease went back; the well-behaved connection goes on, without RNR.
    await expect.poll(() => server.stats().receivePool?.leased).toBe(16);
    const ch = conn.openChannel('ok');
    for (let i = 0; i < 50; i++) {
      await ch.send(new Uint8Array(100).fill(i), LONG);
      (await ch.receive(LONG)).release();
    }
    expect(conn.stats().rnrCount).toBe(0);
  }, 60_000);
});

// What the contract suite cannot see of RdmaTransport: QPs per channel count, RNR, the
// zero-copy paths, what an unauthenticated peer receives, leaks after close and after a
// peer's death, and each polling policy. Real processes where a peer must die; both ends
// in this process (two soft devices) elsewhere.
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  HANDSHAKE_MESSAGE_BYTES,
  Handshake,
  type InboundMessage,
  type RdmaConnection,
  type RdmaTransport,
  type RdmaTransportOptions,
  type SessionKeys,
} from '../src/index.js';
import { ControlSealer } from '../src/internal/ControlSeal.js';
import { fillPattern, prng, sizeMix } from './contract/pattern.js';
import { spawnContractPeer } from './contract/spawnPeer.js';
import { rdmaTarget } from './rdmaTarget.js';
import { rdmaPair } from './support/rdmaPair.js';

const SECRET = 'rdma transport test secret (test only)';
const LONG = { timeoutMs: 120_000 };
const MiB = 1024 * 1024;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A server that echoes every message on every channel, and a client transport. */
const pair = (options: RdmaTransportOptions = {}) =>
  rdmaPair(cleanups, { secret: SECRET, options });

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

describe('RdmaTransport', () => {
  it('ten_thousand_channels_to_a_forked_peer_use_two_QPs_and_never_see_RNR', async () => {
    const peer = await spawnContractPeer(rdmaTarget.peerScript, SECRET);
    cleanups.push(() => peer.kill());
    const conn = (await rdmaTarget
      .transport({})
      .connect({ port: peer.port, secret: SECRET })) as RdmaConnection;
    cleanups.push(() => conn.destroy());
    const N = 10_000;
    const channels = Array.from({ length: N }, () => conn.openChannel('echo'));
    const enc = new TextEncoder();
    await Promise.all(channels.map((ch, i) => ch.send(enc.encode(`m${i}`), LONG)));
    // Hold every echo until all have arrived: far more than the 256 receive buffers.
    const got = await Promise.all(channels.map((ch) => ch.receive(LONG)));
    for (const [i, m] of got.entries()) {
      expect(new TextDecoder().decode(m.bytes)).toBe(`m${i}`);
      m.release();
    }
    const s = conn.stats();
    expect(s.qps).toBe(2);
    expect(s.rnrCount).toBe(0);
    expect(s.eagerSent).toBe(N);
    expect(s.eagerReceived).toBe(N);
    // Holding more than the buffers: later arrivals were copied out, the sender never starved.
    expect(s.receiveCopies).toBeGreaterThan(0);
    await conn.close(LONG);
    expect(conn.state).toBe('closed');
  });

  it('own_blocks_go_without_a_copy_eager_gathered_and_by_rendezvous_from_remote_read_blocks', async () => {
    const { client, conn } = await pair({ qpPoolSize: 2 });
    const alloc = client.allocator;
    const ch = conn.openChannel('echo');
    const r = prng(7);
    for (const n of sizeMix(11, 24, 16 * MiB)) {
      const expected = fillPattern(new Uint8Array(n), n);
      // The connection's pool (a remote-read block goes by READ in place) or the transport's.
      const block = r() < 0.5 ? conn.allocator.alloc(n, 'remote-read') : alloc.alloc(n, 'local');
      block.bytes.set(expected);
      if (n >= 2 && r() < 0.5) {
        const cut = n >> 1;
        await ch.send([block.slice(0, cut), block.slice(cut)], { ...LONG, transfer: true });
      } else {
        await ch.send(block, { ...LONG, transfer: true });
      }
      expect(block.released).toBe(true);
      const m = await ch.receive(LONG);
      expect(m.length).toBe(n);
      expect(Buffer.compare(m.bytes, expected)).toBe(0);
      // Received into registered memory of the transport's own allocator.
      expect(m.block === undefined || alloc.owns(m.block)).toBe(true);
      m.release();
    }
    const s = conn.stats();
    expect(s.eagerSent + s.rendezvousSent).toBe(24);
    expect(s.rendezvousSent).toBeGreaterThan(0);
    expect(s.rnrCount).toBe(0);
  });

  it('a_wrong_secret_or_version_gets_nothing_but_handshake_messages_no_endpoint_or_key', async () => {
    const { listener, rejects } = await pair();
    async function raw(secret: string, version?: number): Promise<Buffer> {
      const hs = new Handshake({
        role: 'client',
        secret,
        limits: { maxFrameBytes: 1 << 20, windowBytes: 1 << 20, windowMessages: 16 },
        transport: 'rdma',
        ...(version === undefined ? {} : { version }),
      });
      const socket = net.connect({ port: listener.port, host: '127.0.0.1' });
      const chunks: Buffer[] = [];
      let buffered = Buffer.alloc(0);
      socket.on('data', (c: Buffer) => {
        chunks.push(c);
        buffered = Buffer.concat([buffered, c]);
        while (buffered.length >= HANDSHAKE_MESSAGE_BYTES) {
          const msg = buffered.subarray(0, HANDSHAKE_MESSAGE_BYTES);
          buffered = buffered.subarray(HANDSHAKE_MESSAGE_BYTES);
          try {
            const reply = hs.receive(msg);
            if (reply !== undefined) socket.write(reply);
          } catch {
            const rej = hs.rejection;
            if (rej !== undefined) socket.write(rej);
          }
        }
      });
      socket.write(hs.start());
      const closed = new Promise((resolve) => socket.on('close', resolve));
      // A client that passed stays silent: the server must not volunteer its setup.
      const quiet = setInterval(() => {
        if (hs.state === 'done') setTimeout(() => socket.destroy(), 300);
      }, 50);
      await closed;
      clearInterval(quiet);
      return Buffer.concat(chunks);
    }
    // Wrong secret: the server's CHALLENGE (whose proof this client refuses), nothing else.
    const bad = await raw('definitely not the shared secret');
    expect(bad.length).toBe(HANDSHAKE_MESSAGE_BYTES);
    // Wrong version: REJECT at once.
    const old = await raw(SECRET, 99);
    expect(old.length).toBe(HANDSHAKE_MESSAGE_BYTES);
    // Right secret: CHALLENGE and ACCEPT; QP endpoints only follow the client's own setup.
    const ok = await raw(SECRET);
    expect(ok.length).toBe(2 * HANDSHAKE_MESSAGE_BYTES);
    await expect
      .poll(() => rejects)
      .toEqual(expect.arrayContaining(['ERR_MUX_AUTH', 'ERR_MUX_VERSION']));
  });

  it('a_malformed_setup_after_a_good_handshake_is_rejected_and_frees_what_the_server_made', async () => {
    const { server, listener, rejects } = await pair();
    const before = server.allocator.leakReport().liveBlocks;
    for (const payload of [Buffer.from('not a setup'), Buffer.alloc(9000)]) {
      const hs = new Handshake({
        role: 'client',
        secret: SECRET,
        limits: { maxFrameBytes: 1 << 20, windowBytes: 1 << 20, windowMessages: 16 },
        transport: 'rdma',
      });
      const socket = net.connect({ port: listener.port, host: '127.0.0.1' });
      let buffered = Buffer.alloc(0);
      const done = (): boolean => hs.state === 'done';
      socket.on('data', (c: Buffer) => {
        buffered = Buffer.concat([buffered, c]);
        while (buffered.length >= HANDSHAKE_MESSAGE_BYTES && !done()) {
          const reply = hs.receive(buffered.subarray(0, HANDSHAKE_MESSAGE_BYTES));
          buffered = buffered.subarray(HANDSHAKE_MESSAGE_BYTES);
          if (reply !== undefined) socket.write(reply);
          if (done()) {
            // A control frame, sealed with this connection's key: type 1 (Setup), then
            // bytes that are no setup.
            const keys = hs.sessionKeys as SessionKeys;
            socket.write(new ControlSealer(keys.send).seal(1, payload));
          }
        }
      });
      socket.on('error', () => {});
      socket.write(hs.start());
      await new Promise((resolve) => socket.on('close', resolve));
    }
    await expect.poll(() => rejects.filter((c) => c === 'ERR_MUX_PROTOCOL').length).toBe(2);
    // Nothing of the refused peers stays registered.
    expect(server.allocator.leakReport().liveBlocks).toBe(before);
  });

  it('close_on_both_sides_leaves_every_block_released_and_held_messages_valid_until_released', async () => {
    const { client, server, conn, serverConns } = await pair({
      qpPoolSize: 2,
      recvBufferCount: 16,
    });
    const chans = Array.from({ length: 8 }, () => conn.openChannel('echo'));
    const kept: InboundMessage[] = [];
    await Promise.all(
      chans.map(async (ch, c) => {
        for (const [i, n] of [1, 100, 9000, 300_000, 2 * MiB].entries()) {
          await ch.send(fillPattern(new Uint8Array(n), c * 10 + i), LONG);
          const m = await ch.receive(LONG);
          if (i % 2 === 0) kept.push(m);
          else m.release();
        }
      }),
    );
    expect(client.allocator.leakReport().liveBlocks).toBeGreaterThan(0);
    const sc = serverConns[0] as RdmaConnection;
    const serverClosed = new Promise((resolve) => sc.once('close', resolve));
    await conn.close(LONG);
    await serverClosed;
    expect(sc.state).toBe('closed');
    expect(server.allocator.leakReport().blocks).toEqual([]);
    // Only what the application still holds is live, and it is intact.
    expect(client.allocator.leakReport().liveBlocks).toBe(kept.length);
    for (const m of kept) {
      expect(m.bytes.length).toBe(m.length);
      m.release();
    }
    expect(client.allocator.leakReport().blocks).toEqual([]);
  });

  it('nothing_is_posted_after_goaway_even_when_held_messages_are_released_while_closing', async () => {
    // A window return that is due at once (a quarter of a small window) released after this
    // side's goaway: the peer takes any message after the goaway for a protocol violation.
    const { client, conn, serverConns } = await pair({
      maxMessageBytes: 1 * MiB,
      windowBytes: 1 * MiB + 16,
    });
    const ch = conn.openChannel('echo');
    const kept: InboundMessage[] = [];
    for (const n of [300_000, 10, 400_000]) {
      await ch.send(fillPattern(new Uint8Array(n), n), LONG);
      kept.push(await ch.receive(LONG));
    }
    const sc = serverConns[0] as RdmaConnection;
    let framesAtGoAway = -1;
    // The server enters 'closing' on the client's goaway (client and server share this process).
    sc.on('state', (st) => {
      if (st !== 'closing') return;
      framesAtGoAway = conn.stats().framesOut;
      for (const m of kept.splice(0)) m.release();
    });
    const serverClosed = new Promise((resolve) => sc.once('close', resolve));
    await conn.close(LONG);
    await serverClosed;
    expect(framesAtGoAway).toBeGreaterThan(0);
    expect(conn.stats().framesOut).toBe(framesAtGoAway);
    expect(sc.state).toBe('closed');
    expect(sc.error).toBeUndefined();
    expect(conn.state).toBe('closed');
    expect(client.allocator.leakReport().blocks).toEqual([]);
  });

  it('window_space_of_a_released_rendezvous_message_reaches_a_stalled_sender_without_other_traffic', async () => {
    // A's buffer credit went back when its notice arrived; the application releases A later,
    // too little to make a return due at once (< a quarter of the window, < half in flight).
    // Only the credits' flush delay can return its window space, and B waits for it.
    const { conn, serverConns } = await pair({
      maxMessageBytes: 1 * MiB,
      windowBytes: 1 * MiB + 16,
    });
    const ch = conn.openChannel('echo');
    await ch.send(fillPattern(new Uint8Array(200_000), 1), LONG);
    const a = await ch.receive(LONG);
    const big = fillPattern(new Uint8Array(900_000), 2);
    await ch.send(big, LONG);
    const b = ch.receive(LONG);
    // The echo of B cannot fit beside A in this side's window: the server waits for A.
    const sc = serverConns[0] as RdmaConnection;
    await expect.poll(() => sc.stats().sendStalls, { timeout: 60_000 }).toBe(1);
    // Let what the last messages owe go first (several flush delays), so nothing but A's
    // release is left to return: no message of this side is due to carry it.
    await new Promise((r) => setTimeout(r, 100));
    const before = conn.stats();
    a.release();
    const m = await b;
    expect(Buffer.compare(m.bytes, big)).toBe(0);
    m.release();
    const after = conn.stats();
    expect(after.rendezvousReceived).toBe(2);
    expect(after.creditUpdates).toBeGreaterThan(before.creditUpdates);
  });

  it('a_SIGKILLed_peer_fails_the_connection_and_releases_every_block_here', async () => {
    const peer = await spawnContractPeer(rdmaTarget.peerScript, SECRET);
    cleanups.push(() => peer.kill());
    const transport = rdmaTarget.transport({}) as RdmaTransport;
    cleanups.push(() => transport.close());
    const conn = (await transport.connect({ port: peer.port, secret: SECRET })) as RdmaConnection;
    conn.on('error', () => {});
    const ch = conn.openChannel('hold');
    for (const n of [10, 5000, 200_000]) await ch.send(new Uint8Array(n), LONG);
    const pending = rejection(ch.receive(LONG));
    peer.signal('SIGKILL');
    const err = await pending;
    expect((err as { code?: string }).code).toBe('ERR_MUX_CONNECTION_LOST');
    expect(conn.state).toBe('failed');
    expect(transport.allocator.leakReport().blocks).toEqual([]);
  });

  it('closing_the_transport_destroys_its_connections_and_later_calls_are_typed_errors', async () => {
    const { client, conn } = await pair();
    const ch = conn.openChannel('echo');
    const waiting = rejection(ch.receive(LONG));
    client.close();
    client.close(); // idempotent
    expect(conn.state).toBe('closed');
    expect(((await waiting) as { code?: string }).code).toBe('ERR_MUX_CLOSED');
    expect(() => client.allocator).toThrow(expect.objectContaining({ code: 'ERR_MUX_CLOSED' }));
    await expect(client.connect({ port: 1, secret: SECRET })).rejects.toMatchObject({
      code: 'ERR_MUX_CLOSED',
    });
  });

  for (const pollPolicy of ['event', 'adaptive', 'busy'] as const) {
    it(`round_trips_under_the_${pollPolicy}_poll_policy`, async () => {
      const { conn } = await pair({ pollPolicy });
      const ch = conn.openChannel('echo');
      for (let i = 0; i < 200; i++) {
        await ch.send(new Uint8Array([i & 0xff, 1, 2, 3]), LONG);
        const m = await ch.receive(LONG);
        expect(m.bytes[0]).toBe(i & 0xff);
        m.release();
      }
      expect(conn.stats().rnrCount).toBe(0);
    });
  }

  it('the_adaptive_poll_loop_polls_after_traffic_then_goes_idle', async () => {
    const { conn, serverConns } = await pair({ pollPolicy: 'adaptive' });
    const ch = conn.openChannel('echo');
    for (let i = 0; i < 100; i++) {
      await ch.send(new Uint8Array(8), LONG);
      (await ch.receive(LONG)).release();
    }
    const conns = [conn, ...serverConns];
    // Traffic made the loop poll both ends (sends posted, receives reaped).
    for (const c of conns) expect(c.stats().pollTurns).toBeGreaterThan(0);
    // With no traffic every end leaves the loop once spinUs passed after its last activity (a
    // credit update flushed after creditFlushMs is activity too): within a bounded number of
    // checks, a check finds no end polled and no turn run since the previous check.
    const snapshot = () => conns.map((c) => [c.stats().polling, c.stats().pollTurns]);
    let before = snapshot();
    let quiet = false;
    for (let i = 0; i < 50 && !quiet; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const now = snapshot();
      quiet = now.every(([polling]) => polling === false) && String(now) === String(before);
      before = now;
    }
    expect(quiet).toBe(true);
    // And the event wakes them: traffic goes on.
    await ch.send(new Uint8Array(8), LONG);
    (await ch.receive(LONG)).release();
  });

  it('the_adaptive_policy_with_spin_0_never_polls', async () => {
    const { conn, serverConns } = await pair({ pollPolicy: 'adaptive', spinUs: 0 });
    const ch = conn.openChannel('echo');
    for (let i = 0; i < 20; i++) {
      await ch.send(new Uint8Array(8), LONG);
      (await ch.receive(LONG)).release();
    }
    for (const c of [conn, ...serverConns]) {
      expect(c.stats().pollTurns).toBe(0);
      expect(c.stats().polling).toBe(false);
    }
  });

  for (const pollPolicy of ['event', 'adaptive'] as const)
    it(`an_idle_connection_under_the_${pollPolicy}_policy_does_not_spin`, async () => {
      const { conn } = await pair({ pollPolicy });
      const ch = conn.openChannel('echo');
      await ch.send(new Uint8Array(8), LONG);
      (await ch.receive(LONG)).release();
      const cpu = process.cpuUsage();
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, 1000));
      const used = process.cpuUsage(cpu);
      const wall = performance.now() - t0;
      // Both ends live in this process: spinning on either would use a whole core.
      expect((used.user + used.system) / 1000).toBeLessThan(wall * 0.25);
    });
});

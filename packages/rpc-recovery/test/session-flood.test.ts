// Hostile authenticated clients against the session layer: a flood of sessions must not evict
// live ones from the de-duplication table (they would fail ERR_RPC_SESSION_EVICTED for good),
// IPv6 addresses of one /64 are one peer, a connection gets one data channel, connections are
// bounded per host, and a peer that pings without reading gets no pile of queued pongs.
import { EventEmitter } from 'node:events';
import type { Channel, Connection } from '@rdmajs/mux';
import { TcpTransport } from '@rdmajs/tcp';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DeduplicationTable,
  decodeSessionFrame,
  ExponentialBackoff,
  encodeRequestHeader,
  encodeSessionFrame,
  MethodRegistry,
  RPC_CONTROL_CHANNEL,
  RPC_DATA_CHANNEL,
  RpcClient,
  RpcServer,
  SessionAuthority,
  type SessionFrame,
} from '../src/index.js';
import { codeOf } from './support/codeOf.js';

const KEY = new Uint8Array(32).fill(7);
const secret = 'rpc-session-flood-secret-0123456789';
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const sid = (i: number) => `s${i.toString(16).padStart(8, '0')}`;

describe('DeduplicationTable with an eviction guard', () => {
  it('a_full_table_of_live_sessions_refuses_a_new_one_and_evicts_none', () => {
    const evicted: string[] = [];
    const t = new DeduplicationTable({ maxSessions: 4, onEvict: (id) => evicted.push(id) });
    const live = new Set<string>();
    t.guardEviction((id) => live.has(id));
    for (let i = 0; i < 4; i++) {
      t.openSession(sid(i), 0, `peer${i}`);
      live.add(sid(i));
    }
    expect(codeOf(() => t.openSession(sid(9), 0, 'attacker'))).toBe('ERR_RPC_DEDUP_TABLE_FULL');
    expect(evicted).toEqual([]);
    for (let i = 0; i < 4; i++) expect(t.hasSession(sid(i))).toBe(true);
    // One that can no longer resume (ended, expired) makes room.
    live.delete(sid(2));
    t.openSession(sid(9), 0, 'attacker');
    expect(evicted).toEqual([sid(2)]);
    expect(t.hasSession(sid(0))).toBe(true);
  });

  it('requests_beyond_the_total_entries_are_refused_rather_than_evicting_a_live_session', () => {
    const t = new DeduplicationTable({ maxTotalEntries: 2, maxEntriesPerSession: 2 });
    t.guardEviction(() => true);
    t.openSession(sid(1));
    t.openSession(sid(2));
    t.begin(sid(1), 0);
    t.complete(sid(1), 0, new Uint8Array(1));
    t.begin(sid(2), 0);
    expect(codeOf(() => t.begin(sid(2), 1))).toBe('ERR_RPC_DEDUP_TABLE_FULL');
    expect(t.hasSession(sid(1))).toBe(true);
    // Retryable: once the client acknowledges, the request runs.
    t.complete(sid(2), 0, new Uint8Array(1));
    expect(t.begin(sid(2), 1, 1)).toEqual({ status: 'new' });
  });

  it('a_reply_that_finds_no_room_is_dropped_not_a_live_session', () => {
    const t = new DeduplicationTable({ maxTotalBytes: 8, maxBytesPerSession: 8 });
    t.guardEviction(() => true);
    t.openSession(sid(1));
    t.openSession(sid(2));
    t.begin(sid(1), 0);
    t.complete(sid(1), 0, new Uint8Array(8));
    t.begin(sid(2), 0);
    t.complete(sid(2), 0, new Uint8Array(8));
    expect(t.hasSession(sid(1))).toBe(true);
    expect(codeOf(() => t.begin(sid(2), 0))).toBe('ERR_RPC_DEDUP_REPLY_DROPPED');
    expect(t.stats().repliesDropped).toBe(1);
  });

  it('a_peer_holds_at_most_maxSessionsPerPeer_and_its_own_dead_sessions_make_room', () => {
    const t = new DeduplicationTable({ maxSessions: 100, maxSessionsPerPeer: 2 });
    const live = new Set<string>([sid(1), sid(2), sid(3)]);
    t.guardEviction((id) => live.has(id));
    t.openSession(sid(1), 0, 'a');
    t.openSession(sid(2), 0, 'a');
    expect(codeOf(() => t.openSession(sid(4), 0, 'a'))).toBe('ERR_RPC_PEER_LIMIT');
    t.openSession(sid(3), 0, 'b'); // another peer is not affected
    live.delete(sid(1));
    t.openSession(sid(4), 0, 'a');
    expect(t.hasSession(sid(1))).toBe(false);
    expect(t.hasSession(sid(2))).toBe(true);
    // Bookkeeping follows closes: a closed session frees its peer's slot.
    t.closeSession(sid(2));
    t.openSession(sid(5), 0, 'a');
  });

  it('a_peer_that_never_acknowledges_is_refused_at_its_share_of_entries_not_everyone', () => {
    const t = new DeduplicationTable({ maxTotalEntries: 100, maxEntriesPerPeer: 3 });
    t.guardEviction(() => true);
    t.openSession(sid(1), 0, 'hog');
    t.openSession(sid(2), 0, 'hog');
    t.openSession(sid(3), 0, 'b');
    t.begin(sid(1), 0);
    t.begin(sid(1), 1);
    t.begin(sid(2), 0);
    // Its share is spent over its sessions together; another peer is still served.
    expect(codeOf(() => t.begin(sid(2), 1))).toBe('ERR_RPC_PEER_LIMIT');
    expect(t.begin(sid(3), 0)).toEqual({ status: 'new' });
    // Acknowledged (and completed) requests free the share; a closed session frees its own.
    t.complete(sid(1), 0, new Uint8Array(1));
    expect(t.begin(sid(1), 2, 1)).toEqual({ status: 'new' });
    expect(codeOf(() => t.begin(sid(2), 1))).toBe('ERR_RPC_PEER_LIMIT');
    t.closeSession(sid(1));
    expect(t.begin(sid(2), 1)).toEqual({ status: 'new' });
  });
});

describe('session flood over TcpTransport', () => {
  it('flooding_sessions_leaves_a_live_session_working_and_refuses_the_flood_typed', async () => {
    let count = 0;
    const reg = new MethodRegistry();
    reg.register('inc', () => Uint8Array.of(++count));
    const dedup = new DeduplicationTable({ maxSessions: 4 });
    const server = new RpcServer(reg, { key: KEY, dedup });
    const transport = new TcpTransport();
    const listener = await transport.listen({ secret });
    listener.on('connection', (c) => server.serve(c));
    cleanups.push(() => listener.close());
    const connect = () =>
      RpcClient.connect({
        transport,
        port: listener.port,
        secret,
        backoff: new ExponentialBackoff({ baseMs: 5, capMs: 10, maxAttempts: 2 }),
      });
    const victim = await connect();
    cleanups.push(() => victim.close());
    expect((await victim.call('inc', new Uint8Array(0)))[0]).toBe(1);
    const flood: RpcClient[] = [];
    let refused: unknown;
    for (let i = 0; i < 8 && refused === undefined; i++) {
      try {
        flood.push(await connect());
      } catch (err) {
        refused = err;
      }
    }
    cleanups.push(() => Promise.all(flood.map((c) => c.close())).then(() => {}));
    expect(flood.length).toBe(3);
    // Every client here is 127.0.0.1: its share of the table (maxSessionsPerPeer, at most
    // maxSessions) runs out first; from many hosts it is ERR_RPC_DEDUP_TABLE_FULL (unit tests).
    expect(refused).toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
    expect((refused as { cause?: { code?: string } }).cause?.code).toBe('ERR_RPC_PEER_LIMIT');
    expect(dedup.stats().sessionsEvicted).toBe(0);
    // The victim's session was not evicted: its non-idempotent calls still run (exactly once).
    expect((await victim.call('inc', new Uint8Array(0)))[0]).toBe(2);
    expect(victim.session.state).toBe('connected');
  });

  it('a_second_rpc_data_channel_fails_the_connection_with_ERR_RPC_CHANNEL_LIMIT', async () => {
    const reg = new MethodRegistry();
    const server = new RpcServer(reg, { key: KEY });
    const transport = new TcpTransport();
    const listener = await transport.listen({ secret });
    const served: Connection[] = [];
    listener.on('connection', (c) => {
      served.push(c);
      server.serve(c);
    });
    cleanups.push(() => listener.close());
    const conn = await transport.connect({ port: listener.port, secret });
    conn.on('error', () => {});
    cleanups.push(() => conn.destroy());
    const control = conn.openChannel(RPC_CONTROL_CHANNEL);
    await control.send(encodeSessionFrame({ kind: 'open' }));
    const m = await control.receive({ copy: true, timeoutMs: 5000 });
    expect(decodeSessionFrame(m.bytes).kind).toBe('welcome');
    m.release();
    conn.openChannel(RPC_DATA_CHANNEL);
    conn.openChannel(RPC_DATA_CHANNEL);
    const closed = new Promise<void>((r) => conn.once('close', () => r()));
    await closed;
    const s = served[0] as Connection;
    expect(s.error).toMatchObject({ code: 'ERR_RPC_CHANNEL_LIMIT' });
    expect(server.stats().dropped).toBe(1);
  });
});

describe('a malformed request while the server is at its concurrency bound', () => {
  it('fails_the_connection_with_ERR_RPC_PROTOCOL_instead_of_dropping_it_as_expired', async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => {
      open = r;
    });
    const reg = new MethodRegistry();
    reg.register('hold', () => gate.then(() => new Uint8Array(0)), { idempotent: true });
    const server = new RpcServer(reg, { key: KEY, maxConcurrentRequests: 1 });
    const transport = new TcpTransport();
    const listener = await transport.listen({ secret });
    const served: Connection[] = [];
    listener.on('connection', (c) => {
      served.push(c);
      server.serve(c);
    });
    cleanups.push(async () => {
      open();
      await listener.close();
    });
    const conn = await transport.connect({ port: listener.port, secret });
    conn.on('error', () => {});
    cleanups.push(() => conn.destroy());
    const control = conn.openChannel(RPC_CONTROL_CHANNEL);
    await control.send(encodeSessionFrame({ kind: 'open' }));
    const m = await control.receive({ copy: true, timeoutMs: 5000 });
    const welcome = decodeSessionFrame(m.bytes);
    m.release();
    if (welcome.kind !== 'welcome') throw new Error('no welcome');
    const data = conn.openChannel(RPC_DATA_CHANNEL);
    const header = {
      requestId: 1,
      sessionSeq: 0,
      ackBelow: 0,
      epoch: welcome.epoch,
      deadlineMs: 10_000,
      payloadLength: 0,
      idempotent: true,
      method: 'hold',
    };
    await data.send(encodeRequestHeader(header)); // takes the one slot and holds it
    const bad = encodeRequestHeader({ ...header, requestId: 2 });
    bad.fill(0xff, 28, 32); // a deadline budget past maxDeadlineMs: no valid request
    const closed = new Promise<void>((r) => conn.once('close', () => r()));
    await data.send(bad);
    await closed;
    expect((served[0] as Connection).error).toMatchObject({ code: 'ERR_RPC_PROTOCOL' });
    expect(server.stats().expired).toBe(0);
  });
});

/** A Connection double: enough of mux's contract for RpcServer.serve. */
class FakeConnection extends EventEmitter {
  state: 'open' | 'closed' = 'open';
  readonly role = 'server' as const;
  error: Error | undefined;
  constructor(readonly remoteAddress: string) {
    super();
  }
  destroy(err?: Error): void {
    if (this.state === 'closed') return;
    this.error = err;
    this.state = 'closed';
    this.emit('close', err);
  }
  close(): Promise<void> {
    this.destroy();
    return Promise.resolve();
  }
}

/** A control channel double fed with frames; pongs are never taken by the "peer". */
class FakeControl {
  readonly name = RPC_CONTROL_CHANNEL;
  readonly sent: SessionFrame[] = [];
  readonly #queue: SessionFrame[] = [];
  #wake: (() => void) | undefined;
  feed(f: SessionFrame): void {
    this.#queue.push(f);
    this.#wake?.();
  }
  async receive(): Promise<{ bytes: Uint8Array; release(): void }> {
    while (this.#queue.length === 0) await new Promise<void>((r) => (this.#wake = r));
    const f = this.#queue.shift() as SessionFrame;
    return { bytes: encodeSessionFrame(f), release() {} };
  }
  send(bytes: Uint8Array): Promise<void> {
    const f = decodeSessionFrame(bytes);
    this.sent.push(f);
    // The peer never reads: a pong stays queued for ever.
    return f.kind === 'pong' ? new Promise<void>(() => {}) : Promise.resolve();
  }
}

describe('connection bounds and pongs (Connection doubles)', () => {
  it('ipv6_addresses_of_one_64_count_as_one_peer_for_maxConnectionsPerPeer', () => {
    const server = new RpcServer(new MethodRegistry(), { key: KEY, maxConnectionsPerPeer: 2 });
    const a = new FakeConnection('2001:db8:1:2::1:40000');
    const b = new FakeConnection('2001:db8:1:2:ffff:1:2:3:40001');
    const c = new FakeConnection('2001:db8:1:2::99:40002');
    const other = new FakeConnection('2001:db8:1:3::1:40003');
    for (const x of [a, b, c, other]) server.serve(x as unknown as Connection);
    expect(a.state).toBe('open');
    expect(b.state).toBe('open');
    expect(c.state).toBe('closed');
    expect(c.error).toMatchObject({ code: 'ERR_RPC_CONNECTION_LIMIT', retryable: true });
    expect(other.state).toBe('open'); // another /64
    expect(server.stats().connectionsRefused).toBe(1);
    a.destroy();
    const d = new FakeConnection('2001:db8:1:2::5:40004');
    server.serve(d as unknown as Connection);
    expect(d.state).toBe('open');
    for (const x of [b, other, d]) x.destroy();
    expect(server.stats().connections).toBe(0);
  });

  it('maxConnections_bounds_every_host_together', () => {
    const server = new RpcServer(new MethodRegistry(), { key: KEY, maxConnections: 2 });
    const conns = ['10.0.0.1:1', '10.0.0.2:1', '10.0.0.3:1'].map((r) => new FakeConnection(r));
    for (const x of conns) server.serve(x as unknown as Connection);
    expect(conns.map((x) => x.state)).toEqual(['open', 'open', 'closed']);
    for (const x of conns) x.destroy();
  });

  it('a_peer_that_pings_but_never_reads_gets_one_queued_pong', async () => {
    const server = new RpcServer(new MethodRegistry(), {
      authority: new SessionAuthority({ key: KEY }),
    });
    const conn = new FakeConnection('127.0.0.1:5000');
    server.serve(conn as unknown as Connection);
    const control = new FakeControl();
    conn.emit('channel', control as unknown as Channel);
    control.feed({ kind: 'open' });
    for (let i = 0; i < 50; i++) control.feed({ kind: 'ping', nonce: i });
    for (let i = 0; i < 100 && server.stats().pongsSkipped < 49; i++) {
      await new Promise((r) => setImmediate(r));
    }
    expect(control.sent.filter((f) => f.kind === 'pong')).toHaveLength(1);
    expect(server.stats().pongsSkipped).toBe(49);
    conn.destroy();
  });
});

// The state × fault matrix with real processes, over TcpTransport and over RdmaTransport
// (soft provider): servers (and a client) forked, killed, stopped and restarted on the same
// address, QPs broken by verbs fault injection. Every call either succeeds exactly once or
// fails with a typed error before its deadline.
import diagnostics_channel from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Connection } from '@rdmajs/mux';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DIAGNOSTICS_CHANNELS,
  ExponentialBackoff,
  RpcClient,
  type RpcClientOptions,
  type SessionStateChange,
  type StaleEpochDrop,
} from '../src/index.js';
import { counterService } from './fixtures/counter-service.js';
import { breakLiveQps } from './fixtures/qp-tap.js';
import { type Peer, spawnClient, spawnServer } from './support/spawn.js';
import { makeTransport, type TransportKind } from './support/transports.js';

const secret = 'rpc-fault-secret-0123456789-abcdefghijklmnop';
const keyHex = '11'.repeat(32);
const key = new Uint8Array(Buffer.from(keyHex, 'hex'));
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const u32 = (n: number): Uint8Array => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n);
  return b;
};
const readU32 = (b: Uint8Array): number => new DataView(b.buffer, b.byteOffset, 4).getUint32(0);

function stateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'rpc-fault-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function nextState(c: RpcClient, to: SessionStateChange['to']): Promise<SessionStateChange> {
  return new Promise((resolve) => {
    const on = (s: SessionStateChange): void => {
      if (s.to !== to) return;
      c.session.off('state', on);
      resolve(s);
    };
    c.session.on('state', on);
  });
}

/** A transport of this kind, closed after the test (after what uses it). */
function transportOf(kind: TransportKind) {
  const t = makeTransport(kind);
  cleanups.push(() => t.close?.());
  return t;
}

// 'rdma-fallback': RDMA clients whose every RDMA setup fails (the forked servers' QPs break
// at creation; in-process listeners speak TCP only), so each connection falls back to TCP,
// while probes of RDMA keep failing in the background.
describe.each(['tcp', 'rdma', 'rdma-fallback'] as const)(
  'fault matrix over %s, real processes',
  (kind) => {
    const forced = kind === 'rdma-fallback';
    const transport = () => transportOf(forced ? 'rdma' : kind);
    /** What in-process listeners of the matrix listen with. */
    const listenerTransport = () => transportOf(forced ? 'tcp' : kind);
    async function server(args: {
      port?: number;
      tcpPort?: number | undefined;
      stateFile?: string;
      cutAfterRecord?: number;
    }) {
      const { tcpPort, ...rest } = args;
      const peer = await spawnServer({
        port: args.port ?? 0,
        secret,
        key: keyHex,
        transport: forced ? 'rdma' : kind,
        ...(forced ? { refuseRdma: true, tcpPort: tcpPort ?? 0 } : {}),
        ...rest,
      });
      cleanups.push(() => peer.kill());
      return peer;
    }

    async function client(
      target: { port: number; tcpPort?: number | undefined },
      extra: Partial<RpcClientOptions> = {},
    ): Promise<RpcClient> {
      const fallback = forced
        ? {
            fallback: {
              transport: transportOf('tcp'),
              port: target.tcpPort ?? target.port,
              probeIntervalMs: 500,
            },
          }
        : {};
      const c = await RpcClient.connect({
        transport: transport(),
        port: target.port,
        ...fallback,
        secret,
        heartbeatIntervalMs: 100,
        heartbeatMisses: 5,
        connectTimeoutMs: 2000,
        backoff: new ExponentialBackoff({ baseMs: 20, capMs: 200, deadlineMs: 20_000 }),
        ...extra,
      });
      cleanups.push(() => c.close());
      return c;
    }

    async function restart(peer: Peer, stateFile?: string): Promise<Peer> {
      await peer.kill();
      return server({
        port: peer.port,
        tcpPort: peer.tcpPort,
        ...(stateFile === undefined ? {} : { stateFile }),
      });
    }

    it('client_reconnects_after_server_kill_during_call', async () => {
      const file = join(stateDir(), 'state.json');
      const s1 = await server({ stateFile: file });
      const c = await client(s1);
      const epoch1 = c.session.epoch;
      // The server dies while the call runs (before it applied anything): it runs once, later.
      const call = c.call('slowInc', u32(400), { deadlineMs: 20_000 });
      await new Promise((r) => setTimeout(r, 100));
      const s2 = await restart(s1, file);
      expect(readU32(await call)).toBe(1);
      expect(await s2.ask('count')).toBe(1);
      expect(c.session.epoch).toBeGreaterThan(epoch1);
      expect(c.stats()).toMatchObject({ state: 'connected', reconnects: 1, replayed: 1 });
    });

    it('server_killed_again_during_replay_still_runs_the_call_once', async () => {
      const file = join(stateDir(), 'state.json');
      const s1 = await server({ stateFile: file });
      const c = await client(s1);
      const call = c.call('slowInc', u32(500), { deadlineMs: 30_000 });
      await new Promise((r) => setTimeout(r, 100));
      const reconnected = nextState(c, 'connected');
      const s2 = await restart(s1, file);
      await reconnected; // the replay is running on s2 now
      await new Promise((r) => setTimeout(r, 100));
      const s3 = await restart(s2, file);
      expect(readU32(await call)).toBe(1);
      expect(await s3.ask('count')).toBe(1);
      expect(c.stats()).toMatchObject({ reconnects: 2, replayed: 2 });
    });

    it('server_dedups_replayed_push', async () => {
      // The server executes and records the push, then its connection is cut before the reply.
      const s = await server({ cutAfterRecord: 1 });
      const c = await client(s);
      const recovering = nextState(c, 'recovering');
      expect(readU32(await c.call('inc', new Uint8Array(0), { deadlineMs: 20_000 }))).toBe(1);
      await recovering;
      expect(await s.ask('count')).toBe(1);
      expect(c.stats()).toMatchObject({ replayed: 1, answeredFromTable: 1 });
      expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(2);
    });

    it('handshake_rejects_bad_secret', async () => {
      const s = await server({});
      const err = await RpcClient.connect({
        transport: transport(),
        port: s.port,
        secret: 'not-the-secret-0123456789-abcdefghijklmnop',
      }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'ERR_MUX_AUTH' });
    });

    it('server_sigstopped_heartbeat_fails_then_recovers', async () => {
      const s = await server({});
      const c = await client(s);
      const recovering = nextState(c, 'recovering');
      s.signal('SIGSTOP');
      const call = c.call('echo', u32(42), { idempotent: true, deadlineMs: 20_000 });
      const change = await recovering;
      expect(change.reason).toMatchObject({ code: 'ERR_RPC_HEARTBEAT_TIMEOUT' });
      const connected = nextState(c, 'connected');
      s.signal('SIGCONT');
      expect(readU32(await call)).toBe(42);
      expect((await connected).epoch).toBeGreaterThan(1);
      expect(c.stats().heartbeatTimeouts).toBeGreaterThanOrEqual(1);
    });

    it('server_killed_during_the_reconnect_handshake_then_restarted_resumes', async () => {
      const file = join(stateDir(), 'state.json');
      const s1 = await server({ stateFile: file });
      const c = await client(s1);
      expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(1);
      const recovering = nextState(c, 'recovering');
      s1.signal('SIGSTOP'); // its kernel still accepts: the client's next handshake hangs on it
      await recovering;
      const call = c.call('inc', new Uint8Array(0), { deadlineMs: 20_000 });
      await new Promise((r) => setTimeout(r, 300));
      const connected = nextState(c, 'connected');
      const s2 = await restart(s1, file); // SIGKILL mid-handshake, then the same address again
      expect((await connected).sessionId).toBe(c.session.sessionId);
      expect(readU32(await call)).toBe(2);
      expect(await s2.ask('count')).toBe(2);
    });

    it('server_sigstopped_past_the_deadline_fails_the_call_typed', async () => {
      const s = await server({});
      const c = await client(s);
      s.signal('SIGSTOP');
      cleanups.push(() => s.signal('SIGCONT'));
      await expect(c.call('inc', new Uint8Array(0), { deadlineMs: 300 })).rejects.toMatchObject({
        code: 'ERR_RPC_DEADLINE',
      });
    });

    it('server_restarted_on_same_address_resumes_the_session', async () => {
      const file = join(stateDir(), 'state.json');
      const s1 = await server({ stateFile: file });
      const c = await client(s1);
      const id = c.session.sessionId;
      expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(1);
      const connected = nextState(c, 'connected');
      await restart(s1, file);
      const change = await connected;
      expect(change.sessionId).toBe(id);
      expect(change.epoch).toBeGreaterThan(1);
      expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(2);
    });

    it('server_restarted_without_its_state_fails_the_session_typed', async () => {
      const s1 = await server({});
      const c = await client(s1);
      const failed = nextState(c, 'failed');
      const call = c.call('slowInc', u32(2000), { deadlineMs: 20_000 });
      await new Promise((r) => setTimeout(r, 100));
      await restart(s1);
      expect((await failed).reason).toMatchObject({ code: 'ERR_RPC_SESSION_UNKNOWN' });
      await expect(call).rejects.toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
      await expect(c.call('echo', u32(1), { idempotent: true })).rejects.toMatchObject({
        code: 'ERR_RPC_SESSION_FAILED',
      });
    });

    it('server_gone_for_good_fails_calls_typed_and_gives_the_session_up', async () => {
      const s = await server({});
      const c = await client(s, {
        backoff: new ExponentialBackoff({ baseMs: 10, capMs: 50, maxAttempts: 5 }),
      });
      const failed = nextState(c, 'failed');
      const call = c.call('echo', u32(1), { idempotent: true, deadlineMs: 20_000 });
      await s.kill();
      expect((await failed).reason).toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
      await expect(call).rejects.toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
    });

    it('client_killed_mid_call_leaves_the_server_serving', async () => {
      const lt = listenerTransport();
      const svc = counterService({ key });
      const listener = await lt.listen({ secret });
      listener.on('connection', (conn) => svc.server.serve(conn));
      cleanups.push(() => listener.close());
      const peer = await spawnClient({
        port: listener.port,
        secret,
        transport: forced ? 'rdma' : kind,
        fallback: forced,
      });
      cleanups.push(() => peer.kill());
      expect(svc.server.stats().connections).toBe(1);
      await peer.kill();
      for (let i = 0; i < 200 && svc.server.stats().connections > 0; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      expect(svc.server.stats().connections).toBe(0);
      // Its call still ran once (the reply had nowhere to go); others are served as before.
      for (let i = 0; i < 500 && svc.count() === 0; i++)
        await new Promise((r) => setTimeout(r, 10));
      expect(svc.count()).toBe(1);
      const c = await client(listener);
      expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(2);
    });

    it('control_connection_cut_recovers_and_replays_the_call', async () => {
      const lt = listenerTransport();
      const svc = counterService({ key });
      const listener = await lt.listen({ secret });
      const conns: Connection[] = [];
      listener.on('connection', (conn) => {
        conns.push(conn);
        svc.server.serve(conn);
      });
      cleanups.push(() => listener.close());
      const c = await client(listener);
      const call = c.call('slowInc', u32(200), { deadlineMs: 20_000 });
      await new Promise((r) => setTimeout(r, 50));
      for (const x of conns) x.destroy(); // cut while the call runs
      expect(readU32(await call)).toBe(1);
      expect(svc.count()).toBe(1);
      expect(c.stats()).toMatchObject({ reconnects: 1, replayed: 1 });
    });

    it('stale_epoch_completion_is_dropped', async () => {
      const lt = listenerTransport();
      const svc = counterService({ key });
      const listener = await lt.listen({ secret });
      const conns: Connection[] = [];
      listener.on('connection', (conn) => {
        conns.push(conn);
        // Every reply also goes out once more, first, as if from the previous epoch.
        conn.on('channel', (ch) => {
          if (ch.name !== 'rpc') return;
          const send = ch.send.bind(ch);
          ch.send = (msg, opts) => {
            const parts = msg as Uint8Array[];
            const header = (parts[0] as Uint8Array).slice();
            const v = new DataView(header.buffer);
            v.setUint32(8, v.getUint32(8) - 1);
            void send([header, new Uint8Array(parts[1]?.length ?? 0).fill(0xee)], opts);
            return send(msg, opts);
          };
        });
        svc.server.serve(conn);
      });
      cleanups.push(() => listener.close());
      const c = await client(listener);
      const connected = nextState(c, 'connected');
      for (const x of conns) x.destroy(); // epoch 2 next, so a stale copy says epoch 1
      await connected;
      const drops: StaleEpochDrop[] = [];
      const onDrop = (m: unknown): void => {
        drops.push(m as StaleEpochDrop);
      };
      diagnostics_channel.subscribe(DIAGNOSTICS_CHANNELS.staleEpoch, onDrop);
      cleanups.push(() => {
        diagnostics_channel.unsubscribe(DIAGNOSTICS_CHANNELS.staleEpoch, onDrop);
      });
      expect(readU32(await c.call('echo', u32(7), { idempotent: true }))).toBe(7);
      expect(c.stats().staleDropped).toBe(1);
      expect(drops).toEqual([
        {
          sessionId: c.session.sessionId,
          epoch: c.session.epoch - 1,
          current: c.session.epoch,
          kind: 'stale',
        },
      ]);
    });

    it('session_states_are_published_on_diagnostics_channel', async () => {
      const seen: string[] = [];
      const on = (m: unknown): void => {
        const s = m as SessionStateChange;
        seen.push(`${s.from}>${s.to}`);
      };
      diagnostics_channel.subscribe(DIAGNOSTICS_CHANNELS.sessionState, on);
      cleanups.push(() => {
        diagnostics_channel.unsubscribe(DIAGNOSTICS_CHANNELS.sessionState, on);
      });
      const file = join(stateDir(), 'state.json');
      const s1 = await server({ stateFile: file });
      const c = await client(s1);
      const connected = nextState(c, 'connected');
      await restart(s1, file);
      await connected;
      await c.close();
      expect(seen).toEqual([
        'connecting>connected',
        'connected>recovering',
        'recovering>connected',
        'connected>closed',
      ]);
    });

    // Verbs fault injection: a QP moved to the error state fails its RDMA connection (the
    // next work request completes in error), and the session recovers on new QPs.
    it.runIf(kind === 'rdma')(
      'server_qp_broken_by_fault_injection_mid_call_runs_it_once',
      async () => {
        const s = await server({});
        const c = await client(s);
        const epoch1 = c.session.epoch;
        const call = c.call('slowInc', u32(300), { deadlineMs: 20_000 });
        await new Promise((r) => setTimeout(r, 100));
        expect(await s.ask<number>('break-qps')).toBeGreaterThan(0);
        // The call is replayed on the new QPs and runs once. Whether the replay is answered
        // from the table (the break was noticed when the reply was posted, after the handler
        // finished) or joins the running call (noticed sooner, e.g. by the receives flushed
        // at the break) depends on when the server sees the QP fail: both are exactly-once.
        expect(readU32(await call)).toBe(1);
        expect(await s.ask('count')).toBe(1);
        expect(c.session.epoch).toBeGreaterThan(epoch1);
        const stats = c.stats();
        expect(stats).toMatchObject({ state: 'connected', reconnects: 1, replayed: 1 });
        expect(stats.answeredFromTable).toBeLessThanOrEqual(1);
        expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(2);
      },
    );

    it.runIf(kind === 'rdma')(
      'client_qp_broken_by_fault_injection_recovers_on_new_qps',
      async () => {
        const s = await server({});
        const c = await client(s);
        expect(readU32(await c.call('inc', new Uint8Array(0)))).toBe(1);
        const recovering = nextState(c, 'recovering');
        expect(breakLiveQps()).toBeGreaterThan(0);
        // The call's SEND completes in error: the connection fails, the call is replayed.
        const call = c.call('inc', new Uint8Array(0), { deadlineMs: 20_000 });
        expect((await recovering).reason).toBeInstanceOf(Error);
        expect(readU32(await call)).toBe(2);
        expect(await s.ask('count')).toBe(2);
        expect(c.stats()).toMatchObject({ state: 'connected', reconnects: 1 });
      },
    );

    it.runIf(kind === 'rdma')('qp_broken_past_the_deadline_fails_typed_never_hangs', async () => {
      const s = await server({});
      const c = await client(s, {
        backoff: new ExponentialBackoff({ baseMs: 10, capMs: 50, maxAttempts: 3 }),
      });
      const failed = nextState(c, 'failed');
      const call = c.call('slowInc', u32(200), { deadlineMs: 20_000 });
      await new Promise((r) => setTimeout(r, 50));
      await s.ask('break-qps');
      await s.kill(); // and nobody to recover to
      await expect(call).rejects.toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
      expect((await failed).reason).toMatchObject({ code: 'ERR_RPC_SESSION_FAILED' });
    });
  },
);

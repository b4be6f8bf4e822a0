// A receive repost refused for now must not fail the connection. Seen in `pnpm bench mux`:
// `receive repost failed` (the SRQ post gave up on a queue lock held by a peer process).
// Here a real peer process takes the server SRQ's lock and is SIGSTOPped while the server
// releases what it received: the reposts are refused (ERR_RDMA_BUSY), the buffers stay
// with the connection, their credits owed to the client only once posted (flowctl's
// accounting throws on a credit released twice), and a retry posts them once the holder is gone (killed: its lock is taken over). Then
// every message arrives exactly once, in order, without an RNR.
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  type Endpoint,
  openDevice,
  ProtectionDomain,
  type RdmaError,
  type SharedReceiveQueue,
} from '@rdmajs/verbs';
import { afterEach, describe, expect, it } from 'vitest';
import type { InboundMessage, MuxError, RdmaConnection } from '../src/index.js';
import { rdmaPair } from './support/rdmaPair.js';

const SECRET = 'rdma repost busy test secret (test only)';
const LONG = { timeoutMs: 120_000 };

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Every SRQ made from here on, by the PD that made it (mux keeps its SRQ private). */
const srqs = new Map<ProtectionDomain, SharedReceiveQueue>();
const createSrq = ProtectionDomain.prototype.createSrq;
ProtectionDomain.prototype.createSrq = function tapped(
  this: ProtectionDomain,
  ...args: Parameters<ProtectionDomain['createSrq']>
): SharedReceiveQueue {
  const srq = createSrq.apply(this, args);
  srqs.set(this, srq);
  return srq;
};

async function until(what: string, cond: () => boolean, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

function spawnHolder(): { proc: ChildProcess; next: () => Promise<Record<string, unknown>> } {
  const proc = fork(fileURLToPath(new URL('./fixtures/srq-lock-holder.ts', import.meta.url)), [], {
    execArgv: ['--conditions=@rdmajs/source', '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  cleanups.push(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
  });
  return { proc, next: () => new Promise((r) => proc.once('message', r)) };
}

/**
 * A server (device of its own, so its PD and SRQ are told from the client's) whose channels
 * hold what arrives, a client connected to it with one channel, and the client's lease
 * (16) delivered one message at a time (numbered 0 …): the last arrives alone, so the
 * first release reposts on its own (not in a batch with others of its drain). Then a peer
 * process takes the server SRQ's lock and is stopped holding it.
 */
async function stoppedHolderScene() {
  const serverDev = openDevice({ provider: 'soft' });
  let serverPd: ProtectionDomain | undefined;
  const allocPd = serverDev.allocPd.bind(serverDev);
  serverDev.allocPd = () => {
    serverPd = allocPd();
    return serverPd;
  };
  cleanups.push(() => serverDev.close());
  const held: InboundMessage[] = [];
  const { conn, serverConns } = await rdmaPair(cleanups, {
    secret: SECRET,
    serverOptions: { device: serverDev },
    hold: held,
  });
  conn.on('error', () => {});

  const ch = conn.openChannel('numbers');
  const send = (i: number) => {
    const b = new Uint8Array(64);
    new DataView(b.buffer).setUint32(0, i);
    return ch.send(b, LONG);
  };
  const sends: Promise<void>[] = [];
  for (let i = 0; i < FIRST; i++) {
    sends.push(send(i));
    await until(`message ${i}`, () => held.length > i);
  }
  const serverConn = serverConns[0] as RdmaConnection;

  const srq = srqs.get(serverPd as ProtectionDomain);
  if (srq === undefined || serverPd === undefined) throw new Error('no server SRQ');
  const cq = serverDev.createCq({ capacity: 16 });
  const tapQp = serverPd.createQp({ sendCq: cq, recvCq: cq, srq });
  cleanups.push(() => {
    tapQp.close();
    cq.close();
  });
  const holder = spawnHolder();
  await holder.next();
  holder.proc.send({ op: 'connect', endpoint: tapQp.endpoint() });
  const { endpoint } = (await holder.next()) as { endpoint: Endpoint };
  tapQp.connect(endpoint);
  holder.proc.send({ op: 'hold' });
  await holder.next();
  holder.proc.kill('SIGSTOP');

  // The numbers of the messages the server released, in order.
  const got: number[] = [];
  const take = () => {
    for (const m of held.splice(0)) {
      got.push(new DataView(m.bytes.buffer, m.bytes.byteOffset, 4).getUint32(0));
      m.release();
    }
  };
  return { conn, serverConn, ch, send, sends, holder, held, got, take };
}

/** Messages sent one at a time before the stop: the client's lease. */
const FIRST = 16;

describe('RdmaConnection receive reposts refused for now', () => {
  it('a_repost_refused_while_a_stopped_peer_holds_the_srq_lock_goes_again_and_every_message_arrives_once', async () => {
    const { conn, serverConn, ch, send, sends, holder, held, got, take } =
      await stoppedHolderScene();
    // The server releases what it holds: every repost is refused and retried. The rest of
    // the messages wait for the client's credits.
    const N = 64;
    take();
    for (let i = FIRST; i < N; i++) sends.push(send(i));
    await until('three retries', () => serverConn.stats().repostRetries >= 3);
    expect(serverConn.state).toBe('open');

    // The holder dies: its lock is taken over, the next retry posts the buffers and the
    // client gets its credits back.
    holder.proc.kill('SIGKILL');
    await until('every message', () => {
      take();
      return got.length >= N;
    });
    await Promise.all(sends);
    expect(got).toEqual(Array.from({ length: N }, (_, i) => i));
    expect(serverConn.state).toBe('open');
    expect(conn.state).toBe('open');
    expect(serverConn.stats().rnrCount).toBe(0);
    expect(conn.stats().rnrCount).toBe(0);
    // And the connection goes on as before.
    await ch.send(new Uint8Array(8), LONG);
    await until('one more', () => held.length === 1);
    take();
  }, 120_000);

  it('reposts_refused_past_the_retry_bound_fail_the_connection_naming_the_busy_queue', async () => {
    const { serverConn, take } = await stoppedHolderScene();
    const closed = new Promise<unknown>((r) => serverConn.once('close', r));
    take(); // the holder stays stopped: every retry is refused
    const err = (await closed) as MuxError;
    expect(serverConn.state).toBe('failed');
    expect(err.code).toBe('ERR_MUX_CONNECTION_LOST');
    expect(err.message).toMatch(/receive repost failed/);
    expect((err.cause as RdmaError).code).toBe('ERR_RDMA_BUSY');
    expect(serverConn.stats().repostRetries).toBe(12);
  }, 120_000);
});

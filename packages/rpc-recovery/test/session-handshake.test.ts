// The session handshake against a peer that knows a session id but not its token.
import { TcpTransport } from '@rdmajs/tcp';
import { afterEach, describe, expect, it } from 'vitest';
import {
  decodeSessionFrame,
  ExponentialBackoff,
  encodeSessionFrame,
  MethodRegistry,
  RPC_CONTROL_CHANNEL,
  RPC_DATA_CHANNEL,
  RpcClient,
  RpcDecodeError,
  RpcServer,
  SESSION_FRAME_VERSION,
  type SessionFrame,
  SessionFrameKind,
} from '../src/index.js';

const secret = 'rpc-handshake-secret-0123456789-abcdefghijklmnop';
const key = new Uint8Array(32).fill(9);
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup() {
  const transport = new TcpTransport();
  const reg = new MethodRegistry();
  reg.register('echo', (p) => p.slice(), { idempotent: true });
  const server = new RpcServer(reg, { key, handshakeTimeoutMs: 500 });
  const listener = await transport.listen({ secret });
  const conns: import('@rdmajs/mux').Connection[] = [];
  listener.on('connection', (c) => {
    conns.push(c);
    server.serve(c);
  });
  cleanups.push(() => listener.close());
  return { transport, server, listener, conns };
}

async function raw(transport: TcpTransport, port: number) {
  const conn = await transport.connect({ port, secret });
  cleanups.push(() => conn.destroy());
  const ch = conn.openChannel(RPC_CONTROL_CHANNEL);
  return {
    conn,
    send: (f: SessionFrame) => ch.send(encodeSessionFrame(f)),
    next: async (): Promise<SessionFrame> => {
      const m = await ch.receive({ copy: true, timeoutMs: 5000 });
      const f = decodeSessionFrame(m.bytes);
      m.release();
      return f;
    },
  };
}

describe('session handshake', () => {
  it('stolen_session_id_with_a_bad_proof_is_refused_and_the_holder_still_resumes', async () => {
    const { transport, listener, conns, server } = await setup();
    const client = await RpcClient.connect({
      transport,
      port: listener.port,
      secret,
      backoff: new ExponentialBackoff({ baseMs: 5, capMs: 20 }),
    });
    cleanups.push(() => client.close());
    const id = client.session.sessionId as string;
    // The thief asks for a challenge (it is outstanding while the holder resumes) ...
    const thief = await raw(transport, listener.port);
    await thief.send({ kind: 'resume', sessionId: id, lastEpoch: 1 });
    const c = await thief.next();
    expect(c.kind).toBe('challenge');
    // ... the holder's connection is cut and it resumes meanwhile ...
    const resumed = new Promise((r) => client.session.once('connected', r));
    conns[0]?.destroy();
    await resumed;
    expect(client.session.epoch).toBe(2);
    // ... and the thief's answer without the token resumes nothing.
    await thief.send({ kind: 'proof', proof: new Uint8Array(32) });
    expect(await thief.next()).toMatchObject({ kind: 'refused', code: 'ERR_RPC_AUTH' });
    expect(server.stats()).toMatchObject({ refused: 1, resumed: 1 });
    const out = await client.call('echo', new Uint8Array([5]), { idempotent: true });
    expect([...out]).toEqual([5]);
  });

  it('a_peer_of_another_protocol_version_is_refused_typed_in_its_own_version', async () => {
    const { transport, listener, server } = await setup();
    const conn = await transport.connect({ port: listener.port, secret });
    cleanups.push(() => conn.destroy());
    const ch = conn.openChannel(RPC_CONTROL_CHANNEL);
    // A version-1 peer's Open (its request frames would not pad the method).
    await ch.send(new Uint8Array([SessionFrameKind.Open, 1, 0, 0]));
    const m = await ch.receive({ copy: true, timeoutMs: 5000 });
    const bytes = m.bytes.slice();
    m.release();
    expect(bytes[1]).toBe(1); // in the peer's version: a version-1 peer can read it
    expect(decodeSessionFrame(bytes)).toMatchObject({ kind: 'refused', code: 'ERR_RPC_VERSION' });
    expect(server.stats()).toMatchObject({ refused: 1, opened: 0 });
  });

  it('a_client_facing_a_server_of_another_version_fails_for_good_typed', async () => {
    const transport = new TcpTransport();
    const listener = await transport.listen({ secret });
    cleanups.push(() => listener.close());
    listener.on('connection', (c) => {
      c.on('error', () => {});
      c.on('channel', (ch) => {
        // Answers any control frame with a Welcome-kind frame of a future version.
        void ch
          .receive({ copy: true, timeoutMs: 5000 })
          .then((m) => {
            m.release();
            return ch.send(new Uint8Array([SessionFrameKind.Welcome, 3, 0, 0]));
          })
          .catch(() => {});
      });
    });
    const err = await RpcClient.connect({ transport, port: listener.port, secret }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RpcDecodeError);
    expect(err).toMatchObject({ code: 'ERR_RPC_VERSION', retryable: false, offset: 1 });
  });

  it('unknown_session_resume_is_refused_typed', async () => {
    const { transport, listener } = await setup();
    const peer = await raw(transport, listener.port);
    await peer.send({ kind: 'resume', sessionId: 'cd'.repeat(16), lastEpoch: 0 });
    expect(await peer.next()).toMatchObject({ kind: 'refused', code: 'ERR_RPC_SESSION_UNKNOWN' });
  });

  it('calls_before_the_session_handshake_drop_the_connection', async () => {
    const { transport, listener, server } = await setup();
    const conn = await transport.connect({ port: listener.port, secret });
    cleanups.push(() => conn.destroy());
    const closed = new Promise((r) => conn.once('close', r));
    const ch = conn.openChannel(RPC_DATA_CHANNEL);
    await ch.send(new Uint8Array(40)).catch(() => {});
    await closed;
    expect(server.stats().dropped).toBe(1);
  });

  it('silent_peer_is_dropped_at_the_handshake_deadline', async () => {
    const { transport, listener, server } = await setup();
    const conn = await transport.connect({ port: listener.port, secret });
    cleanups.push(() => conn.destroy());
    await new Promise((r) => conn.once('close', r));
    expect(server.stats().dropped).toBe(1);
  });

  it('malformed_control_frame_drops_the_connection', async () => {
    const { transport, listener, server } = await setup();
    const conn = await transport.connect({ port: listener.port, secret });
    cleanups.push(() => conn.destroy());
    const closed = new Promise((r) => conn.once('close', r));
    await conn
      .openChannel(RPC_CONTROL_CHANNEL)
      .send(new Uint8Array([99, SESSION_FRAME_VERSION, 0, 0]));
    await closed;
    expect(server.stats().dropped).toBe(1);
  });
});

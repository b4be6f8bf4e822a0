import { describe, expect, it } from 'vitest';
import {
  HANDSHAKE_MAGIC,
  HANDSHAKE_MESSAGE_BYTES,
  HANDSHAKE_TRANSPORTS,
  Handshake,
  type HandshakeLimits,
  MIN_SECRET_BYTES,
  PROTOCOL_VERSION,
  SESSION_KEY_BYTES,
  type SessionKeys,
} from '../src/index.js';

const limits: HandshakeLimits = {
  maxFrameBytes: 1 << 20,
  windowBytes: 4 << 20,
  windowMessages: 1024,
};
const secret = 'a shared secret of enough bytes, 32+ bytes';

function pair(clientSecret = secret, serverSecret = secret, clientVersion?: number) {
  const client = new Handshake({
    role: 'client',
    secret: clientSecret,
    limits,
    ...(clientVersion === undefined ? {} : { version: clientVersion }),
  });
  const server = new Handshake({
    role: 'server',
    secret: serverSecret,
    limits: { ...limits, windowMessages: 7 },
  });
  return { client, server };
}

describe('handshake', () => {
  it('handshake_succeeds_with_the_same_secret_and_exchanges_limits', () => {
    const { client, server } = pair();
    const hello = client.start();
    expect(hello.length).toBe(HANDSHAKE_MESSAGE_BYTES);
    const challenge = server.receive(hello) as Uint8Array;
    const proof = client.receive(challenge) as Uint8Array;
    const accept = server.receive(proof) as Uint8Array;
    expect(server.state).toBe('done');
    expect(client.receive(accept)).toBeUndefined();
    expect(client.state).toBe('done');
    expect(client.peerLimits).toEqual({ ...limits, windowMessages: 7 });
    expect(server.peerLimits).toEqual(limits);
  });

  it('handshake_messages_have_the_documented_layout', () => {
    const { client } = pair();
    const hello = client.start();
    const v = new DataView(hello.buffer, hello.byteOffset, hello.length);
    expect(v.getUint32(0)).toBe(HANDSHAKE_MAGIC);
    expect(v.getUint16(4)).toBe(PROTOCOL_VERSION);
    expect(v.getUint8(6)).toBe(1); // HELLO
    expect(v.getUint32(72)).toBe(limits.maxFrameBytes);
    expect(v.getUint32(76)).toBe(limits.windowBytes);
    expect(v.getUint32(80)).toBe(limits.windowMessages);
    expect(v.getUint32(84)).toBe(HANDSHAKE_TRANSPORTS.tcp);
  });

  it('the_secret_never_appears_on_the_wire', () => {
    const { client, server } = pair();
    const msgs: Uint8Array[] = [];
    msgs.push(client.start());
    msgs.push(server.receive(msgs[0] as Uint8Array) as Uint8Array);
    msgs.push(client.receive(msgs[1] as Uint8Array) as Uint8Array);
    msgs.push(server.receive(msgs[2] as Uint8Array) as Uint8Array);
    const wire = Buffer.concat(msgs);
    expect(wire.includes(Buffer.from(secret))).toBe(false);
    expect(wire.includes(Buffer.from(secret.slice(0, 8)))).toBe(false);
  });

  it('handshake_rejects_a_wrong_secret_on_both_sides', () => {
    const { client, server } = pair(secret, 'another secret, also long enough: 32+ bytes');
    const challenge = server.receive(client.start()) as Uint8Array;
    let clientErr: unknown;
    try {
      client.receive(challenge);
    } catch (err) {
      clientErr = err;
    }
    expect(clientErr).toMatchObject({ code: 'ERR_MUX_AUTH' });
    expect(client.state).toBe('failed');
    const rejection = client.rejection as Uint8Array;
    expect(() => server.receive(rejection)).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_AUTH' }),
    );
  });

  it('handshake_rejects_a_client_proof_made_with_a_wrong_secret', () => {
    // A client that skips verifying the server and answers with a proof of its own secret.
    const { server } = pair();
    const liar = new Handshake({
      role: 'client',
      secret: 'not the right secret!!, 32+ bytes',
      limits,
    });
    const challenge = server.receive(liar.start()) as Uint8Array;
    const honest = new Handshake({
      role: 'client',
      secret: 'not the right secret!!, 32+ bytes',
      limits,
    });
    honest.start();
    // Build a PROOF by hand: the layout of a proof with garbage HMAC.
    const proof = new Uint8Array(HANDSHAKE_MESSAGE_BYTES);
    proof.set(challenge.subarray(0, 6));
    proof[6] = 3;
    expect(() => server.receive(proof)).toThrow(expect.objectContaining({ code: 'ERR_MUX_AUTH' }));
    expect(server.rejection).toBeDefined();
  });

  it('handshake_rejects_a_wrong_version_with_the_peer_version', () => {
    const { client, server } = pair(secret, secret, PROTOCOL_VERSION + 1);
    let serverErr: unknown;
    try {
      server.receive(client.start());
    } catch (err) {
      serverErr = err;
    }
    expect(serverErr).toMatchObject({ code: 'ERR_MUX_VERSION', peerVersion: PROTOCOL_VERSION + 1 });
    let clientErr: unknown;
    try {
      client.receive(server.rejection as Uint8Array);
    } catch (err) {
      clientErr = err;
    }
    expect(clientErr).toMatchObject({ code: 'ERR_MUX_VERSION', peerVersion: PROTOCOL_VERSION });
  });

  it('handshake_refuses_a_version_4_peer_at_once_not_at_its_v2_rdma_setup', () => {
    // Version 4 peers send RDMA setup v2 (no read QP, no incarnation): the mismatch must be
    // the fatal ERR_MUX_VERSION here, not a retryable ERR_MUX_PROTOCOL at setup decoding.
    expect(PROTOCOL_VERSION).toBe(5);
    const { client, server } = pair(secret, secret, 4);
    let serverErr: unknown;
    try {
      server.receive(client.start());
    } catch (err) {
      serverErr = err;
    }
    expect(serverErr).toMatchObject({ code: 'ERR_MUX_VERSION', peerVersion: 4, retryable: false });
  });

  it('handshake_rejects_malformed_and_unexpected_messages', () => {
    const { client, server } = pair();
    expect(() => server.receive(new Uint8Array(10))).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_HANDSHAKE' }),
    );
    const s2 = new Handshake({ role: 'server', secret, limits });
    expect(() => s2.receive(new Uint8Array(HANDSHAKE_MESSAGE_BYTES))).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_HANDSHAKE' }),
    );
    // A server's own challenge reflected back to it is not a HELLO.
    const s3 = new Handshake({ role: 'server', secret, limits });
    const challenge = s3.receive(client.start()) as Uint8Array;
    expect(() => s3.receive(challenge)).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_HANDSHAKE' }),
    );
    // Limits outside the allowed ranges.
    const c = new Handshake({ role: 'client', secret, limits });
    const hello = c.start();
    new DataView(hello.buffer).setUint32(76, 10);
    const s4 = new Handshake({ role: 'server', secret, limits });
    expect(() => s4.receive(hello)).toThrow(expect.objectContaining({ code: 'ERR_MUX_HANDSHAKE' }));
  });

  it('a_peer_of_the_other_transport_is_refused_at_its_first_message_on_both_sides', () => {
    for (const [mine, theirs] of [
      ['rdma', 'tcp'],
      ['tcp', 'rdma'],
    ] as const) {
      const client = new Handshake({ role: 'client', secret, limits, transport: mine });
      const server = new Handshake({ role: 'server', secret, limits, transport: theirs });
      const hello = client.start();
      expect(new DataView(hello.buffer).getUint32(84)).toBe(HANDSHAKE_TRANSPORTS[mine]);
      // Refused before any proof: the listener answers with REJECT, nothing else.
      expect(() => server.receive(hello)).toThrow(
        expect.objectContaining({ code: 'ERR_MUX_TRANSPORT' }),
      );
      const reject = server.rejection as Uint8Array;
      expect(reject.length).toBe(HANDSHAKE_MESSAGE_BYTES);
      expect(reject.subarray(8, 72).every((b) => b === 0)).toBe(true);
      let clientErr: unknown;
      try {
        client.receive(reject);
      } catch (err) {
        clientErr = err;
      }
      expect(clientErr).toMatchObject({ code: 'ERR_MUX_TRANSPORT' });
      expect(String((clientErr as Error).message)).toContain(`over ${theirs}`);
      expect(client.state).toBe('failed');
    }
    // A server whose CHALLENGE names another transport (say, an older build) is refused too.
    const c = new Handshake({ role: 'client', secret, limits, transport: 'rdma' });
    const s = new Handshake({ role: 'server', secret, limits, transport: 'rdma' });
    const challenge = s.receive(c.start()) as Uint8Array;
    new DataView(challenge.buffer).setUint32(84, HANDSHAKE_TRANSPORTS.tcp);
    expect(() => c.receive(challenge)).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_TRANSPORT' }),
    );
    expect(
      () => new Handshake({ role: 'client', secret, limits, transport: 'udp' as 'tcp' }),
    ).toThrow(expect.objectContaining({ code: 'ERR_MUX_INVALID_ARG' }));
  });

  it('bytes_that_do_not_start_with_the_magic_fail_before_a_whole_message_arrived', () => {
    const server = new Handshake({ role: 'server', secret, limits });
    const hello = new Handshake({ role: 'client', secret, limits }).start();
    // Every prefix of a real message passes.
    for (let n = 0; n <= 8; n++) server.checkPrefix(hello, n);
    expect(server.state).toBe('initial');
    const http = new TextEncoder().encode('HTTP/1.1 400 Bad Request\r\n');
    for (const n of [1, 3, 4]) {
      const s = new Handshake({ role: 'client', secret, limits });
      s.start();
      expect(() => s.checkPrefix(http, n)).toThrow(
        expect.objectContaining({ code: 'ERR_MUX_HANDSHAKE' }),
      );
      expect(s.state).toBe('failed');
    }
  });

  it('a_replayed_proof_does_not_authenticate_a_new_handshake', () => {
    const { client, server } = pair();
    const proof = client.receive(server.receive(client.start()) as Uint8Array) as Uint8Array;
    server.receive(proof);
    const fresh = new Handshake({ role: 'server', secret, limits });
    const c2 = new Handshake({
      role: 'client',
      secret: 'attacker without the secret, 32+ bytes',
      limits,
    });
    fresh.receive(c2.start());
    expect(() => fresh.receive(proof)).toThrow(expect.objectContaining({ code: 'ERR_MUX_AUTH' }));
  });

  it('short_secrets_and_bad_options_throw_invalid_arg', () => {
    expect(() => new Handshake({ role: 'client', secret: 'short', limits })).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_INVALID_ARG' }),
    );
    // The minimum is 32 bytes, counted as bytes (UTF-8 for strings), and the error names it.
    expect(MIN_SECRET_BYTES).toBe(32);
    for (const short of [new Uint8Array(16), new Uint8Array(31), 'x'.repeat(31), 'é'.repeat(15)]) {
      expect(() => new Handshake({ role: 'server', secret: short, limits })).toThrow(
        expect.objectContaining({
          code: 'ERR_MUX_INVALID_ARG',
          message: expect.stringContaining('at least 32 bytes'),
        }),
      );
    }
    for (const ok of [new Uint8Array(32), 'x'.repeat(32), 'é'.repeat(16)]) {
      expect(() => new Handshake({ role: 'server', secret: ok, limits })).not.toThrow();
    }
    expect(() => new Handshake({ role: 'x' as 'client', secret, limits })).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_INVALID_ARG' }),
    );
    expect(
      () => new Handshake({ role: 'client', secret, limits: { ...limits, maxFrameBytes: 0 } }),
    ).toThrow(expect.objectContaining({ code: 'ERR_MUX_INVALID_ARG' }));
  });
});

/** Runs the exchange through `relay`, which may rewrite each message on the way. */
function relayed(relay: (msg: Uint8Array, index: number) => Uint8Array) {
  const { client, server } = pair();
  let i = 0;
  const via = (m: Uint8Array) => relay(Uint8Array.prototype.slice.call(m) as Uint8Array, i++);
  const challenge = server.receive(via(client.start())) as Uint8Array;
  const proof = client.receive(via(challenge)) as Uint8Array;
  const accept = server.receive(via(proof)) as Uint8Array;
  client.receive(via(accept));
  return { client, server };
}

function rewriteU32(msg: Uint8Array, offset: number, value: number): Uint8Array {
  new DataView(msg.buffer, msg.byteOffset, msg.length).setUint32(offset, value);
  return msg;
}

describe('handshake transcript binding', () => {
  it('a_relay_that_rewrites_the_client_limits_is_caught', () => {
    // A relay that shrinks the client's window in HELLO: the server's proof covers the HELLO
    // it saw, so the client fails to verify it.
    expect(() => relayed((m, i) => (i === 0 ? rewriteU32(m, 76, 1 << 30) : m))).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_AUTH' }),
    );
  });

  it('a_relay_that_rewrites_the_server_limits_is_caught', () => {
    expect(() => relayed((m, i) => (i === 1 ? rewriteU32(m, 72, 1) : m))).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_AUTH' }),
    );
  });

  it('a_relay_that_rewrites_the_server_nonce_is_caught', () => {
    expect(() => relayed((m, i) => (i === 1 ? rewriteU32(m, 8, 0xdeadbeef) : m))).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_AUTH' }),
    );
  });

  it('a_relay_that_rewrites_the_client_nonce_is_caught', () => {
    expect(() => relayed((m, i) => (i === 0 ? rewriteU32(m, 8, 0xdeadbeef) : m))).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_AUTH' }),
    );
  });

  it('an_untouched_exchange_gives_matching_per_direction_session_keys', () => {
    const { client, server } = relayed((m) => m);
    const c = client.sessionKeys;
    const s = server.sessionKeys;
    expect(c?.send.length).toBe(SESSION_KEY_BYTES);
    expect(c?.send.equals(s?.receive as Buffer)).toBe(true);
    expect(c?.receive.equals(s?.send as Buffer)).toBe(true);
    expect(c?.send.equals(c.receive)).toBe(false);
    const wire = Buffer.concat([c?.send as Buffer, c?.receive as Buffer]);
    expect(wire.includes(Buffer.from(secret).subarray(0, 16))).toBe(false);
  });

  it('session_keys_differ_between_connections_with_the_same_secret', () => {
    const a = relayed((m) => m).client.sessionKeys as SessionKeys;
    const b = relayed((m) => m).client.sessionKeys as SessionKeys;
    expect(a.send.equals(b.send)).toBe(false);
    expect(a.receive.equals(b.receive)).toBe(false);
  });

  it('session_keys_are_undefined_until_done', () => {
    const { client, server } = pair();
    const challenge = server.receive(client.start()) as Uint8Array;
    expect(server.sessionKeys).toBeUndefined();
    client.receive(challenge);
    expect(client.sessionKeys).toBeUndefined();
  });
});

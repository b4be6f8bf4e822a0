// Frames after the handshake travel in records sealed with the session keys (frameProtection
// 'aead', the default): what a host on the path can no longer do, and what it costs to try.
import { createCipheriv, randomBytes } from 'node:crypto';
import net from 'node:net';
import {
  type Connection,
  encodeFrameHeader,
  FRAME_HEADER_BYTES,
  FrameType,
  writeAeadNonce,
} from '@rdmajs/mux';
import { afterEach, describe, expect, it } from 'vitest';
import { type TcpListener, TcpTransport } from '../src/index.js';
import { MAX_RECORD_BYTES } from '../src/internal/SealedRecords.js';
import { rawPeer } from './rawPeer.js';

const SECRET = 'sealed frames test secret, 32+ bytes long';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** The record format, written out independently of SealedWriter: u32 length | ciphertext | tag. */
function seal(key: Uint8Array, count: number, plaintext: Uint8Array): Buffer {
  const header = Buffer.alloc(4);
  header.writeUInt32BE(plaintext.length, 0);
  const c = createCipheriv('aes-256-gcm', key, writeAeadNonce(Buffer.alloc(12), count));
  c.setAAD(header);
  const body = Buffer.concat([c.update(plaintext), c.final()]);
  return Buffer.concat([header, body, c.getAuthTag()]);
}

function openFrame(channel: number): Buffer {
  const h = Buffer.alloc(FRAME_HEADER_BYTES);
  encodeFrameHeader(h, 0, FrameType.Open, channel, 0, 0);
  return h;
}

async function sealedListener(): Promise<{
  listener: TcpListener;
  next: () => Promise<Connection>;
}> {
  const listener = await new TcpTransport().listen({ secret: SECRET });
  const accepted: Connection[] = [];
  let waiting: ((c: Connection) => void) | undefined;
  listener.on('connection', (c) => {
    c.on('error', () => {});
    accepted.push(c);
    if (waiting !== undefined) {
      const w = waiting;
      waiting = undefined;
      w(c);
    }
  });
  cleanups.push(async () => {
    for (const c of accepted) c.destroy();
    await listener.close();
  });
  const next = () =>
    new Promise<Connection>((resolve) => {
      waiting = resolve;
    });
  return { listener, next };
}

function failure(conn: Connection): Promise<unknown> {
  if (conn.state === 'failed') return Promise.resolve(conn.error);
  return new Promise((resolve) => conn.once('close', (err) => resolve(err)));
}

describe('sealed frames (frameProtection aead, the default)', () => {
  it('a_message_is_not_readable_on_the_wire_and_arrives_intact', async () => {
    // A relay in the middle records what crosses it, both ways.
    for (const protection of ['aead', 'none'] as const) {
      const transport = new TcpTransport({ frameProtection: protection });
      const listener = await transport.listen({ secret: SECRET });
      const seen: Buffer[] = [];
      const relay = net.createServer((down) => {
        const up = net.connect({ port: listener.port, host: '127.0.0.1' });
        down.on('data', (d) => {
          seen.push(Buffer.from(d));
          up.write(d);
        });
        up.on('data', (d) => down.write(d));
        down.on('error', () => up.destroy());
        up.on('error', () => down.destroy());
        down.on('close', () => up.destroy());
      });
      await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
      const relayPort = (relay.address() as net.AddressInfo).port;
      const echoed = new Promise<void>((resolve) => {
        listener.once('connection', (c) => {
          c.once('channel', async (ch) => {
            const m = await ch.receive();
            await ch.send(m.copy());
            m.release();
            resolve();
          });
        });
      });
      const conn = await transport.connect({ port: relayPort, secret: SECRET });
      const secretText = Buffer.from('parameter rows nobody on the path may read: 0123456789');
      const big = randomBytes(MAX_RECORD_BYTES * 2 + 12345); // spans three records
      const ch = conn.openChannel('echo');
      await ch.send([secretText, big]);
      const m = await ch.receive({ timeoutMs: 30_000 });
      expect(Buffer.compare(Buffer.from(m.bytes), Buffer.concat([secretText, big]))).toBe(0);
      m.release();
      await echoed;
      const wire = Buffer.concat(seen);
      expect(wire.includes(secretText)).toBe(protection === 'none');
      await conn.close();
      await listener.close();
      await new Promise<void>((r) => relay.close(() => r()));
    }
  });

  it('an_altered_record_fails_the_connection_with_ERR_MUX_INTEGRITY', async () => {
    const { listener, next } = await sealedListener();
    const got = next();
    const raw = await rawPeer(listener.port, SECRET);
    const conn = await got;
    const record = seal(raw.keys.send, 0, openFrame(1));
    const last = record.length - 1;
    record[last] = (record[last] as number) ^ 1; // one bit of the tag
    raw.socket.write(record);
    expect(await failure(conn)).toMatchObject({ code: 'ERR_MUX_INTEGRITY' });
    expect(conn.state).toBe('failed');
    await raw.closed;
  });

  it('a_replayed_record_fails_the_connection_with_ERR_MUX_INTEGRITY', async () => {
    const { listener, next } = await sealedListener();
    const got = next();
    const raw = await rawPeer(listener.port, SECRET);
    const conn = await got;
    const opened = new Promise((r) => conn.once('channel', r));
    const record = seal(raw.keys.send, 0, openFrame(1));
    raw.socket.write(record);
    await opened; // the genuine one is acted on
    raw.socket.write(record); // the same bytes again: its nonce is spent
    expect(await failure(conn)).toMatchObject({ code: 'ERR_MUX_INTEGRITY' });
  });

  it('a_record_sealed_with_another_key_fails_with_ERR_MUX_INTEGRITY', async () => {
    const { listener, next } = await sealedListener();
    const got = next();
    const raw = await rawPeer(listener.port, SECRET);
    const conn = await got;
    raw.socket.write(seal(raw.keys.receive, 0, openFrame(1))); // the server's own direction
    expect(await failure(conn)).toMatchObject({ code: 'ERR_MUX_INTEGRITY' });
  });

  it('frames_in_clear_to_a_sealed_listener_fail_typed', async () => {
    const { listener, next } = await sealedListener();
    const got = next();
    const raw = await rawPeer(listener.port, SECRET);
    const conn = await got;
    raw.socket.write(openFrame(1)); // its first word reads as a record length of 0x01000000+
    const err = await failure(conn);
    expect(['ERR_MUX_PROTOCOL', 'ERR_MUX_INTEGRITY']).toContain((err as { code: string }).code);
  });

  it('an_oversized_record_length_is_refused_before_anything_is_buffered', async () => {
    const { listener, next } = await sealedListener();
    const got = next();
    const raw = await rawPeer(listener.port, SECRET);
    const conn = await got;
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_RECORD_BYTES + 1, 0);
    raw.socket.write(header); // nothing behind it: refused on the length alone
    expect(await failure(conn)).toMatchObject({ code: 'ERR_MUX_PROTOCOL' });
    await raw.closed;
  });

  it('a_zero_length_record_is_refused', async () => {
    const { listener, next } = await sealedListener();
    const got = next();
    const raw = await rawPeer(listener.port, SECRET);
    const conn = await got;
    raw.socket.write(seal(raw.keys.send, 0, new Uint8Array(0)));
    expect(await failure(conn)).toMatchObject({ code: 'ERR_MUX_PROTOCOL' });
  });

  it('sides_that_disagree_on_frame_protection_are_refused_at_the_handshake', async () => {
    const { listener } = await sealedListener();
    await expect(
      new TcpTransport({ frameProtection: 'none' }).connect({
        port: listener.port,
        secret: SECRET,
      }),
    ).rejects.toMatchObject({ code: 'ERR_MUX_TRANSPORT' });
    const clear = await new TcpTransport({ frameProtection: 'none' }).listen({ secret: SECRET });
    cleanups.push(() => clear.close());
    await expect(
      new TcpTransport().connect({ port: clear.port, secret: SECRET }),
    ).rejects.toMatchObject({ code: 'ERR_MUX_TRANSPORT' });
  });

  it('a_bad_frameProtection_option_is_a_typed_mistake', () => {
    expect(() => new TcpTransport({ frameProtection: 'tls' as never })).toThrow(
      expect.objectContaining({ code: 'ERR_MUX_INVALID_ARG' }),
    );
  });

  it('many_small_messages_in_one_tick_share_records_and_all_arrive_in_order', async () => {
    const { listener, next } = await sealedListener();
    const got = next();
    const conn = await new TcpTransport().connect({ port: listener.port, secret: SECRET });
    cleanups.push(() => conn.destroy());
    const server = await got;
    const chIn = new Promise<import('@rdmajs/mux').Channel>((r) => server.once('channel', r));
    const ch = conn.openChannel('many');
    const sends = [];
    for (let i = 0; i < 2000; i++) {
      const b = new Uint8Array(4);
      new DataView(b.buffer).setUint32(0, i);
      sends.push(ch.send(b));
    }
    await Promise.all(sends);
    const inbound = await chIn;
    for (let i = 0; i < 2000; i++) {
      const m = await inbound.receive({ timeoutMs: 30_000 });
      expect(new DataView(m.bytes.buffer, m.bytes.byteOffset, 4).getUint32(0)).toBe(i);
      m.release();
    }
    expect(conn.stats().writes).toBeLessThan(2000); // batched per tick, not a record each
  });
});

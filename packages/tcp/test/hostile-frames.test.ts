import { type Channel, type Connection, FrameType, writeU32 } from '@rdmajs/mux';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TcpListener, TcpTransport } from '../src/index.js';
import { type RawPeer, rawPeer } from './rawPeer.js';

const SECRET = 'hostile-frames test secret, 32+ bytes';
const KiB = 1024;

describe.each(['aead', 'none'] as const)(
  'a hostile peer after the handshake (frames %s)',
  (protection) => {
    let listener: TcpListener;
    const accepted: Connection[] = [];
    let next: ((c: Connection) => void) | undefined;
    beforeAll(async () => {
      listener = await new TcpTransport({
        maxMessageBytes: 32 * KiB,
        windowBytes: 64 * KiB,
        windowMessages: 8,
        frameProtection: protection,
      }).listen({ secret: SECRET });
      listener.on('connection', (c) => {
        c.on('error', () => {});
        accepted.push(c);
        next?.(c);
      });
    });
    afterAll(async () => {
      for (const c of accepted) c.destroy();
      await listener.close();
    });

    /** A raw peer and the server's side of its connection. */
    async function pair(): Promise<{ raw: RawPeer; conn: Connection }> {
      const got = new Promise<Connection>((resolve) => {
        next = resolve;
      });
      const raw = await rawPeer(listener.port, SECRET, protection);
      return { raw, conn: await got };
    }

    async function failure(conn: Connection): Promise<unknown> {
      if (conn.state === 'failed') return conn.error;
      return new Promise((resolve) => conn.once('close', (err) => resolve(err)));
    }

    const u32s = (...v: number[]) => {
      const b = new Uint8Array(v.length * 4);
      for (const [i, x] of v.entries()) writeU32(b, i * 4, x);
      return b;
    };

    const cases: Array<[string, (raw: RawPeer) => void]> = [
      // A 1 GiB header with no payload behind it: refused on the header alone.
      ['data_longer_than_the_limit', (r) => r.frame(FrameType.Data, 1, 0, undefined, 1 << 30)],
      ['data_for_a_channel_never_opened', (r) => r.frame(FrameType.Data, 7, 0, new Uint8Array(4))],
      [
        'data_out_of_sequence',
        (r) => {
          r.frame(FrameType.Open, 1, 0);
          r.frame(FrameType.Data, 1, 1, new Uint8Array(4));
        },
      ],
      ['an_unknown_frame_type', (r) => r.frame(99 as FrameType, 0, 0)],
      [
        'reserved_header_bits',
        (r) => {
          const h = Buffer.alloc(16);
          h[0] = FrameType.Ping;
          h[1] = 1;
          h[15] = 8;
          r.bytes(Buffer.concat([h, Buffer.alloc(8)]));
        },
      ],
      ['an_open_of_an_id_that_is_the_servers', (r) => r.frame(FrameType.Open, 2, 0)],
      [
        'an_open_of_the_same_id_twice',
        (r) => {
          r.frame(FrameType.Open, 3, 0);
          r.frame(FrameType.Open, 3, 0);
        },
      ],
      ['an_over_long_channel_name', (r) => r.frame(FrameType.Open, 5, 0, new Uint8Array(256))],
      [
        'more_bytes_than_the_receive_window',
        (r) => {
          r.frame(FrameType.Open, 1, 0);
          // 3 × 30 KiB > 64 KiB: the third header overruns the window nobody released.
          for (let i = 0; i < 3; i++) r.frame(FrameType.Data, 1, i, new Uint8Array(30 * KiB));
        },
      ],
      [
        'more_messages_than_the_receive_window',
        (r) => {
          r.frame(FrameType.Open, 1, 0);
          for (let i = 0; i < 9; i++) r.frame(FrameType.Data, 1, i, new Uint8Array(1));
        },
      ],
      ['credit_for_messages_never_sent', (r) => r.frame(FrameType.Credit, 0, 0, u32s(1, 64))],
      ['a_malformed_credit_frame', (r) => r.frame(FrameType.Credit, 0, 0, new Uint8Array(4))],
      [
        'a_frame_after_goaway',
        (r) => {
          r.frame(FrameType.GoAway, 0, 0);
          r.frame(FrameType.Open, 1, 0);
        },
      ],
    ];

    for (const [name, send] of cases) {
      it(`${name}_fails_that_connection_with_ERR_MUX_PROTOCOL`, async () => {
        const { raw, conn } = await pair();
        send(raw);
        const err = await failure(conn);
        expect(err).toMatchObject({ code: 'ERR_MUX_PROTOCOL' });
        expect(conn.state).toBe('failed');
        await raw.closed; // and the socket is gone
      });
    }

    it('a_good_connection_on_the_same_listener_is_unaffected', async () => {
      const { raw: bad, conn: badConn } = await pair();
      const good = await new TcpTransport({ frameProtection: protection }).connect({
        port: listener.port,
        secret: SECRET,
      });
      const serverSide = accepted[accepted.length - 1] as Connection;
      const chans = new Promise<void>((resolve) => {
        serverSide.once('channel', async (ch) => {
          const m = await ch.receive();
          await ch.send(m.copy());
          m.release();
          resolve();
        });
      });
      bad.frame(FrameType.Data, 1, 0, undefined, 1 << 30);
      await failure(badConn);
      const ch = good.openChannel('echo');
      await ch.send(new Uint8Array([1, 2, 3]));
      const m = await ch.receive({ timeoutMs: 30_000 });
      expect([...m.bytes]).toEqual([1, 2, 3]);
      m.release();
      await chans;
      await good.close();
    });
  },
);

describe('the listener', () => {
  it('refuses_garbage_and_silence_with_typed_errors_and_closes_while_connections_stay_open', async () => {
    const listener = await new TcpTransport({ handshakeTimeoutMs: 200 }).listen({
      secret: SECRET,
    });
    const rejects: string[] = [];
    listener.on('reject', (err) => rejects.push((err as unknown as { code: string }).code));
    const net = await import('node:net');
    const garbage = net.connect({ port: listener.port, host: '127.0.0.1' });
    garbage.on('error', () => {});
    garbage.write(Buffer.alloc(88, 0x41));
    const silent = net.connect({ port: listener.port, host: '127.0.0.1' });
    silent.on('error', () => {});
    await expect.poll(() => rejects.length, { timeout: 30_000 }).toBe(2);
    expect(rejects.sort()).toEqual(['ERR_MUX_DEADLINE', 'ERR_MUX_HANDSHAKE']);

    const serverSide = new Promise<Connection>((r) => listener.once('connection', r));
    const client = await new TcpTransport().connect({ port: listener.port, secret: SECRET });
    const server = await serverSide;
    await listener.close();
    await listener.close(); // idempotent
    // The connection made before close still carries messages.
    const inbound = new Promise<Channel>((r) => server.once('channel', r));
    const ch = client.openChannel('after');
    await ch.send(new Uint8Array([9]));
    const m = await (await inbound).receive({ timeoutMs: 30_000 });
    expect([...m.bytes]).toEqual([9]);
    m.release();
    await Promise.all([client.close(), server.close()]);
    const refused = await new TcpTransport()
      .connect({ port: listener.port, secret: SECRET, timeoutMs: 5_000 })
      .catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'ERR_MUX_CONNECTION_LOST' });
  });
});

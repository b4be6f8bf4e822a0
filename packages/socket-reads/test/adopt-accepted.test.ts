import { once } from 'node:events';
import { connect, createServer, type Server, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { adoptAccepted, type OnRead } from '../src/index.js';

const open: Array<Server | Socket> = [];

afterEach(async () => {
  // Sockets first: a server's close() waits for its connections.
  const all = open.splice(0);
  for (const o of all) if (o instanceof Socket) o.destroy();
  for (const o of all)
    if (!(o instanceof Socket) && o.listening) await new Promise((resolve) => o.close(resolve));
});

/** A paused-accepting server on loopback, a client dialed to it, and the accepted socket. */
async function accepted(): Promise<{ server: Server; client: Socket; raw: Socket }> {
  const server = createServer({ pauseOnConnect: true });
  open.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  const accepting = once(server, 'connection') as Promise<[Socket]>;
  const client = connect({ host: '127.0.0.1', port: address.port });
  open.push(client);
  await once(client, 'connect');
  const [raw] = await accepting;
  open.push(raw);
  return { server, client, raw };
}

/** Reads collected as copies of `buffer[0, n)`, with the buffer each read was handed. */
function collector(size = 1024) {
  const buffer = Buffer.alloc(size);
  const reads: Buffer[] = [];
  const buffers: Uint8Array[] = [];
  let pauseNext = false;
  let wake: (() => void) | undefined;
  const onread: OnRead = {
    buffer,
    callback: (n, buf) => {
      reads.push(Buffer.from(buffer.subarray(0, n)));
      buffers.push(buf);
      wake?.();
      if (pauseNext) {
        pauseNext = false;
        return false;
      }
      return true;
    },
  };
  /** Resolves once the reads so far hold `text` in order. */
  const until = async (text: string) => {
    while (Buffer.concat(reads).toString() !== text) {
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  };
  return {
    onread,
    reads,
    buffers,
    until,
    pauseOnNextRead: () => {
      pauseNext = true;
    },
  };
}

/** Resolves when `data` left the client for the kernel (on loopback: the peer's receive queue). */
function write(client: Socket, data: string): Promise<void> {
  return new Promise((resolve, reject) =>
    client.write(data, (err) => (err ? reject(err) : resolve())),
  );
}

describe('adoptAccepted', () => {
  it('reads_into_the_given_buffer: every read lands in the caller buffer, no data event', async () => {
    const { client, raw } = await accepted();
    const c = collector();
    const sock = adoptAccepted(raw, c.onread);
    expect(sock).toBeDefined();
    if (sock === undefined) return;
    open.push(sock);
    let dataEvents = 0;
    sock.on('data', () => dataEvents++);
    await write(client, 'hello');
    await c.until('hello');
    await write(client, ' world');
    await c.until('hello world');
    expect(c.buffers.length).toBe(c.reads.length);
    for (const b of c.buffers) expect(b).toBe(c.onread.buffer);
    expect(dataEvents).toBe(0);
    // The adopted socket writes as any other.
    const echoed = once(client, 'data') as Promise<[Buffer]>;
    sock.write('back');
    expect((await echoed)[0].toString()).toBe('back');
  });

  it('bytes_sent_before_adoption: a paused accept read nothing, so they land in the buffer', async () => {
    const { client, raw } = await accepted();
    await write(client, 'early');
    const c = collector();
    const sock = adoptAccepted(raw, c.onread);
    expect(sock).toBeDefined();
    if (sock !== undefined) open.push(sock);
    await c.until('early');
  });

  it('callback_false_pauses: nothing is read until resume(), then the rest in order', async () => {
    const { client, raw } = await accepted();
    const c = collector();
    const sock = adoptAccepted(raw, c.onread);
    if (sock === undefined) throw new Error('not adopted');
    open.push(sock);
    c.pauseOnNextRead();
    await write(client, 'one');
    await c.until('one');
    const readsWhenPaused = c.reads.length;
    await write(client, 'two');
    // The bytes are in the socket's receive queue; a few loop turns would read them if the
    // socket were reading (this can only pass wrongly, never fail wrongly).
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(c.reads.length).toBe(readsWhenPaused);
    sock.resume();
    await c.until('onetwo');
  });

  it('closed_socket_gives_undefined: a socket without its handle is destroyed, not adopted', async () => {
    const { server, raw } = await accepted();
    raw.destroy();
    expect(adoptAccepted(raw, collector().onread)).toBeUndefined();
    expect(raw.destroyed).toBe(true);
    const never = new Socket();
    expect(adoptAccepted(never, collector().onread)).toBeUndefined();
    expect(never.destroyed).toBe(true);
    // Nothing of it is left counted by the server: close() completes.
    await new Promise<void>((resolve, reject) =>
      server.close((err) => (err ? reject(err) : resolve())),
    );
  });

  it('server_counts_it_once: the adopted socket is the server connection, released on close', async () => {
    const { server, raw } = await accepted();
    const sock = adoptAccepted(raw, collector().onread);
    if (sock === undefined) throw new Error('not adopted');
    open.push(sock);
    const count = () =>
      new Promise<number>((resolve, reject) =>
        server.getConnections((err, n) => (err ? reject(err) : resolve(n))),
      );
    expect(await count()).toBe(1);
    const closed = new Promise<void>((resolve, reject) =>
      server.close((err) => (err ? reject(err) : resolve())),
    );
    sock.destroy();
    await closed; // close() waits for the server's connections to drop to 0
  });

  it('allowHalfOpen_passes_through: after the peer ends, the adopted socket still writes', async () => {
    const { client, raw } = await accepted();
    const c = collector();
    const sock = adoptAccepted(raw, c.onread, { allowHalfOpen: true });
    if (sock === undefined) throw new Error('not adopted');
    open.push(sock);
    expect(sock.allowHalfOpen).toBe(true);
    const ended = once(sock, 'end');
    client.end('last');
    await ended;
    await c.until('last');
    expect(sock.writable).toBe(true);
    const got = once(client, 'data') as Promise<[Buffer]>;
    sock.end('reply');
    expect((await got)[0].toString()).toBe('reply');
  });

  it('not_half_open_by_default: after the peer ends, the adopted socket ends too', async () => {
    const { client, raw } = await accepted();
    const sock = adoptAccepted(raw, collector().onread);
    if (sock === undefined) throw new Error('not adopted');
    open.push(sock);
    expect(sock.allowHalfOpen).toBe(false);
    const finished = once(sock, 'finish');
    client.end();
    await finished;
    expect(sock.writable).toBe(false);
  });
});

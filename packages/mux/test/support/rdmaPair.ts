// Two RdmaTransports of this process connected to each other (each on its own soft device
// unless told otherwise): a server that echoes every message on every channel (or holds what
// arrives), and a client with one connection. Shared by the tests that need both ends' state.
import {
  type Channel,
  type InboundMessage,
  type RdmaConnection,
  RdmaTransport,
  type RdmaTransportOptions,
} from '../../src/index.js';

const LONG = { timeoutMs: 120_000 };

export interface RdmaPairOptions {
  secret: string;
  /** Both transports' options. */
  options?: RdmaTransportOptions;
  /** The server's, on top of `options` (a device of its own, say). */
  serverOptions?: RdmaTransportOptions;
  /** Keep every arriving message here instead of echoing it (released at cleanup if still held). */
  hold?: InboundMessage[];
}

/** Made by `rdmaPair`; its teardown is pushed to `cleanups` (run last-in, first-out). */
export async function rdmaPair(
  cleanups: Array<() => Promise<void> | void>,
  { secret, options = {}, serverOptions = {}, hold }: RdmaPairOptions,
) {
  const server = new RdmaTransport({ ...options, ...serverOptions });
  const client = new RdmaTransport(options);
  const listener = await server.listen({ secret });
  const serverConns: RdmaConnection[] = [];
  const rejects: string[] = [];
  listener.on('reject', (err) => rejects.push((err as { code?: string }).code ?? 'none'));
  listener.on('connection', (c) => {
    const conn = c as RdmaConnection;
    serverConns.push(conn);
    conn.on('error', () => {});
    conn.on('channel', (ch: Channel) => void (hold ? holdAll(ch, hold) : echoAll(ch)));
  });
  cleanups.push(async () => {
    if (hold !== undefined) for (const m of hold.splice(0)) if (!m.released) m.release();
    await listener.close();
    for (const c of serverConns) c.destroy();
    server.close();
    client.close();
  });
  const conn = await client.connect({ port: listener.port, secret });
  cleanups.push(() => conn.destroy());
  return { server, client, listener, conn, serverConns, rejects };
}

async function echoAll(ch: Channel): Promise<void> {
  try {
    for await (const m of ch) {
      try {
        await ch.send(m.bytes, LONG);
      } finally {
        m.release();
      }
    }
    await ch.close(LONG);
  } catch {
    // the connection went away
  }
}

async function holdAll(ch: Channel, hold: InboundMessage[]): Promise<void> {
  try {
    for await (const m of ch) hold.push(m);
  } catch {
    // the connection went away
  }
}

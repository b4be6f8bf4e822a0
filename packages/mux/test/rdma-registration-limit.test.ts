// maxRegisteredBytes bounds a transport's registered memory, receive buffers of every
// connection included: past it a new connection fails typed, the others keep working, and
// memory a closed connection gave back serves the next one.
import { afterEach, describe, expect, it } from 'vitest';
import { type Connection, RdmaTransport } from '../src/index.js';
import { thrownCode } from './support/thrownCode.js';

const SECRET = 'registration limit test secret, test only: 32+ bytes';
const MiB = 1024 * 1024;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (err) {
    return (err as { code?: string }).code;
  }
}

describe('RdmaTransport maxRegisteredBytes', () => {
  it('refuses a limit below one arena', () => {
    expect(thrownCode(() => new RdmaTransport({ maxRegisteredBytes: MiB }))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
    expect(thrownCode(() => new RdmaTransport({ maxRegisteredBytes: 20 * MiB + 0.5 }))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
  });

  it('a connection past the limit fails with ERR_ALLOC_LIMIT; closing one makes room', async () => {
    const server = new RdmaTransport({});
    const listener = await server.listen({ secret: SECRET });
    listener.on('connection', (c) => c.on('error', () => {}));
    // 32 MiB: two arenas; each connection's initial lease of 256 receive buffers of 32 KiB +
    // header takes 8 MiB of the shared pool (the default lease is 16: see rdma-receive-pool).
    const client = new RdmaTransport({ maxRegisteredBytes: 32 * MiB, recvCredits: 256 });
    const conns: Connection[] = [];
    cleanups.push(async () => {
      for (const c of conns) c.destroy();
      await listener.close();
      client.close();
      server.close();
    });
    let refused: string | undefined;
    for (let i = 0; i < 8 && refused === undefined; i++) {
      try {
        conns.push(await client.connect({ port: listener.port, secret: SECRET }));
      } catch (err) {
        refused = (err as { code?: string }).code;
      }
    }
    expect(refused).toBe('ERR_ALLOC_LIMIT');
    expect(conns.length).toBeGreaterThan(0);
    expect(client.allocator.stats().registeredBytes).toBeLessThanOrEqual(32 * MiB);

    // The connections that fit still carry messages.
    const first = conns[0] as Connection;
    const ch = first.openChannel();
    await expect(ch.send(new Uint8Array([1, 2, 3]))).resolves.toBeUndefined();

    // One closed: its receive buffers go back, and the next connection fits again.
    await (conns.pop() as Connection).close();
    const again = client.connect({ port: listener.port, secret: SECRET }).then((c) => {
      conns.push(c);
    });
    expect(await codeOf(again)).toBeUndefined();
  });
});

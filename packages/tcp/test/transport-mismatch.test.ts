// A client of one transport at a listener of the other, or at a server that is no rdmajs
// peer at all, is refused at the first bytes (or the peer's end), with a typed error, never
// by waiting out its deadline. The deadlines here are far longer than the test may run, so
// an error other than ERR_MUX_DEADLINE says the refusal came first; no time is asserted.
import net from 'node:net';
import { type Listener, RdmaTransport, type Transport } from '@rdmajs/mux';
import { afterEach, describe, expect, it } from 'vitest';
import { TcpTransport } from '../src/index.js';

const SECRET = 'transport mismatch test secret, 32+ bytes';
const NEVER = { timeoutMs: 600_000 };

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function codeOfRejection(p: Promise<unknown>): Promise<string | undefined> {
  try {
    const conn = (await p) as { destroy(): void };
    conn.destroy();
  } catch (err) {
    return (err as { code?: string }).code;
  }
  return 'connected';
}

function rejectsSeen(listener: Listener): string[] {
  const codes: string[] = [];
  listener.on('reject', (err) => codes.push((err as { code?: string }).code ?? 'none'));
  return codes;
}

const transports: Array<[string, () => Transport]> = [
  ['tcp', () => new TcpTransport({ handshakeTimeoutMs: 600_000 })],
  ['rdma', () => new RdmaTransport({ handshakeTimeoutMs: 600_000 })],
];

function make(which: () => Transport): Transport {
  const t = which();
  if (t instanceof RdmaTransport) cleanups.push(() => t.close());
  return t;
}

describe('a peer of the other transport', () => {
  for (const [clientName, clientOf] of transports) {
    for (const [serverName, serverOf] of transports) {
      if (clientName === serverName) continue;
      it(`a_${clientName}_client_at_a_${serverName}_listener_is_refused_with_ERR_MUX_TRANSPORT`, async () => {
        const listener = await make(serverOf).listen({ secret: SECRET });
        cleanups.push(() => listener.close());
        const seen = rejectsSeen(listener);
        listener.on('connection', (c) => c.destroy());
        const code = await codeOfRejection(
          make(clientOf).connect({ port: listener.port, secret: SECRET, ...NEVER }),
        );
        expect(code).toBe('ERR_MUX_TRANSPORT');
        await expect.poll(() => seen).toEqual(['ERR_MUX_TRANSPORT']);
      });
    }
  }
});

describe('a server that is no rdmajs peer', () => {
  async function foreignServer(onSocket: (s: net.Socket) => void): Promise<number> {
    const server = net.createServer({ allowHalfOpen: true }, (s) => {
      s.on('error', () => {});
      onSocket(s);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const sockets = new Set<net.Socket>();
    server.on('connection', (s) => sockets.add(s));
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          for (const s of sockets) s.destroy();
          server.close(() => resolve());
        }),
    );
    return (server.address() as net.AddressInfo).port;
  }

  for (const [name, of] of transports) {
    it(`a_${name}_client_fails_at_the_first_bytes_of_an_error_reply_that_stays_open`, async () => {
      // Fewer bytes than a handshake message, and the socket stays open: only the magic tells.
      const port = await foreignServer((s) => s.write('HTTP/1.1 400\r\n'));
      const code = await codeOfRejection(make(of).connect({ port, secret: SECRET, ...NEVER }));
      expect(code).toBe('ERR_MUX_HANDSHAKE');
    });

    it(`a_${name}_client_fails_when_the_server_ends_without_closing`, async () => {
      // A half-close: 'close' would wait for this side's end, so the end itself must fail it.
      const port = await foreignServer((s) => s.end());
      const code = await codeOfRejection(make(of).connect({ port, secret: SECRET, ...NEVER }));
      expect(code).toBe('ERR_MUX_CONNECTION_LOST');
    });
  }
});

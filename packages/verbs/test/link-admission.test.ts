// Admission to the soft TCP link: sockets that never authenticate are capped, the oldest
// dropped for a new one, so they can neither grow without bound nor lock initiators out.
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { SoftEndpoint } from '../src/index.js';
import { HANDSHAKE_DEADLINE_MS } from '../src/internal/soft/link/handshake.js';
import { MAX_PENDING_LINKS } from '../src/internal/soft/link/LinkServer.js';
import { collect, linkPair, type Pair, providers, until } from './harness/pair.js';

interface Silent {
  sock: Socket;
  closed: () => boolean;
}

function silent(port: number): Promise<Silent> {
  return new Promise((resolve, reject) => {
    let closed = false;
    const sock = connect(port, '127.0.0.1', () => resolve({ sock, closed: () => closed }));
    sock.on('error', () => undefined);
    sock.resume(); // read (and drop) the HELLO, so the end of the stream is seen
    sock.once('close', () => {
      closed = true;
    });
    sock.once('error', reject);
  });
}

describe.runIf(providers.includes('soft'))('soft TCP link admission', () => {
  let p: Pair | undefined;
  const socks: Socket[] = [];
  afterEach(() => {
    for (const s of socks.splice(0)) s.destroy();
    p?.close();
    p = undefined;
  });

  it('silent_sockets_beyond_the_cap_drop_the_oldest_and_the_link_still_serves', async () => {
    p = await linkPair();
    const pair = p;
    const port = (pair.b.qp.endpoint() as SoftEndpoint).tcp?.port as number;
    const started = Date.now();
    const extra = 6;
    const held: Silent[] = [];
    for (let i = 0; i < MAX_PENDING_LINKS + extra; i++) {
      const s = await silent(port);
      socks.push(s.sock);
      held.push(s);
    }
    // The oldest `extra` were dropped for newer ones, well before the handshake deadline
    // would have dropped them; the newer ones are still waiting.
    await until(
      () => held.slice(0, extra).every((h) => h.closed()),
      'the oldest dropped',
      HANDSHAKE_DEADLINE_MS / 2,
    );
    const stillOpen = held.slice(extra).filter((h) => !h.closed()).length;
    if (Date.now() - started < HANDSHAKE_DEADLINE_MS) expect(stillOpen).toBe(MAX_PENDING_LINKS);
    // A real initiator gets in while the table is full: a SEND over the link lands.
    pair.b.qp.postRecv({ wrId: 9, sgList: [pair.b.mr.sge(0, 64)] });
    pair.a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [pair.a.mr.sge(0, 4)] });
    expect((await collect(pair.a.cq, 1))[0]?.status).toBe('SUCCESS');
    expect((await collect(pair.b.cq, 1))[0]).toMatchObject({ wrId: 9, status: 'SUCCESS' });
  });
});

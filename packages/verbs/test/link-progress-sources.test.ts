// What counts as progress for a QP's requests on its link connection (LinkClient): bytes of
// those requests leaving through the socket. The same connection carries the QP's answers to
// its peer's requests; their writes say nothing about whether the peer reads our requests, so
// a peer that keeps sending requests and never answers ours must not keep our ACK timer alive.
// Driven at the LinkClient against a raw target that authenticates and never answers.
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ABI } from '../src/internal/abi.js';
import { REQ_HEADER } from '../src/internal/soft/link/frames.js';
import {
  AUTH_BYTES,
  LINK_VERSION,
  newSecret,
  qpLinkKey,
  TargetHandshake,
} from '../src/internal/soft/link/handshake.js';
import { LinkClient, type LinkOwner } from '../src/internal/soft/link/LinkClient.js';
import { providers, until } from './harness/pair.js';

/** A target that authenticates one connection for `target`, then only reads (or not). */
async function silentTarget(target: { slot: number; gen: number }) {
  const secret = newSecret();
  let peer: Socket | undefined;
  const server: Server = createServer((s) => {
    const hs = new TargetHandshake(secret);
    s.on('error', () => undefined);
    s.write(hs.hello(1 << 30));
    let pre = Buffer.alloc(0);
    const onAuth = (d: Buffer) => {
      pre = Buffer.concat([pre, d]);
      if (pre.length < AUTH_BYTES) return;
      s.off('data', onAuth);
      const ok = hs.verify(pre.subarray(0, AUTH_BYTES));
      if (!ok) {
        s.destroy();
        return;
      }
      s.write(ok.welcome);
      s.on('data', () => undefined); // read and dropped: never answered
      peer = s;
    };
    s.on('data', onAuth);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    address: {
      host: '127.0.0.1',
      port,
      key: qpLinkKey(secret, target).toString('base64url'),
      version: LINK_VERSION,
    },
    peer: () => peer as Socket,
    close: () => {
      peer?.destroy();
      server.close();
    },
  };
}

/** A request header as linkTake fills it: a SEND of `length` bytes. */
function sendHeader(token: number, head: boolean, length: number): Float64Array {
  const hdr = new Float64Array(ABI.LINK_WORDS);
  hdr[ABI.LINK_OPCODE] = ABI.OP_SEND;
  hdr[ABI.LINK_LENGTH] = length;
  hdr[ABI.LINK_TOKEN] = token;
  hdr[ABI.LINK_HEAD] = head ? 1 : 0;
  hdr[ABI.LINK_DST_SLOT] = 3;
  hdr[ABI.LINK_DST_GEN] = 1;
  return hdr;
}

const MiB = 1 << 20;

describe.runIf(providers.includes('soft'))('soft TCP link: what is progress', () => {
  let cleanup: (() => void) | undefined;
  afterEach(() => {
    cleanup?.();
    cleanup = undefined;
  });

  it("answers_written_are_not_progress: only buffers holding this QP's requests keep its timer alive", async () => {
    const target = { slot: 3, gen: 1 };
    const t = await silentTarget(target);
    const client = new LinkClient(t.address, target);
    cleanup = () => {
      client.close();
      t.close();
    };
    let progress = 0;
    const owner: LinkOwner = {
      answer: () => undefined,
      progress: () => {
        progress++;
      },
      released: () => undefined,
    };
    await until(() => client.open, 'the handshake');
    /** A SEND of 8 bytes gathered into the Outbox (as SoftQpDriver.onLink does), written. */
    const request = (token: number, head: boolean) => {
      client.beginBatch();
      client.out.reserve(REQ_HEADER + 8);
      client.sendGathered(sendHeader(token, head, 8), owner);
      client.endBatch();
    };
    /** `n` bytes of answers to the peer's requests gathered and written (what the target's side adds). */
    const answers = (n: number) => {
      client.out.reserve(n);
      client.out.commit(n);
      client.flushOut();
    };
    // Our request goes out and is never answered.
    request(1, true);
    // The peer stops reading; our answers to its requests back up in the socket.
    t.peer().pause();
    for (let i = 0; i < 256 && client.backlog < 8 * MiB; i++) answers(MiB);
    expect(client.backlog).toBeGreaterThanOrEqual(8 * MiB);
    const before = progress;
    // It reads them all: every buffer written was answers only.
    t.peer().resume();
    await until(() => client.backlog === 0, 'the answers drained', 20_000);
    expect(progress).toBe(before);
    // A buffer that holds one of our requests is progress once through.
    t.peer().pause();
    for (let i = 0; i < 256 && client.backlog < 8 * MiB; i++) answers(MiB);
    request(2, false);
    t.peer().resume();
    await until(() => client.backlog === 0, 'the request drained', 20_000);
    expect(progress).toBeGreaterThan(before);
  });
});

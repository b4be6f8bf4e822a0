// Link protocol 4: the two QPs of a pair share one connection (the QP with the lower link key
// dials, its peer adopts it): a QP's answers to its peer's requests ride on it beside its own
// requests — so a ping-pong is one write and one read each way, and TCP's ACK of one direction
// rides on the other's data. Watched through a TCP proxy in front of each listener: what the
// connection carries in each direction, and what happens when it is lost with answers on it.
import { createServer, connect as dial, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { openDevice, type SoftEndpoint } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import { ANSWER_BIT, RES_HEADER } from '../src/internal/soft/link/frames.js';
import {
  HELLO_BYTES,
  InitiatorHandshake,
  WELCOME_BYTES,
} from '../src/internal/soft/link/handshake.js';
import { ADOPT_WAIT_MS } from '../src/internal/soft/SoftQpDriver.js';
import { collect, linkPair, providers, type Side, sideOn, sleep, until } from './harness/pair.js';

interface Piped {
  client: Socket;
  upstream: Socket;
  /** bytes the listener sent back to the dialing side */
  down: number;
  /** bytes the dialing side sent */
  up: number;
  /** hold what the listener's side sends (not forwarded while true) */
  holdDown: boolean;
}

/** A TCP proxy in front of `port`, counting what each connection carries each way. */
class CountingProxy {
  readonly conns: Piped[] = [];
  readonly #server: Server;

  constructor(target: number) {
    this.#server = createServer((client) => {
      const upstream = dial(target, '127.0.0.1');
      const p: Piped = { client, upstream, down: 0, up: 0, holdDown: false };
      this.conns.push(p);
      client.setNoDelay(true);
      upstream.setNoDelay(true);
      client.on('data', (d: Buffer) => {
        p.up += d.length;
        upstream.write(d);
      });
      upstream.on('data', (d: Buffer) => {
        if (p.holdDown) return; // dropped: the connection is cut before it would arrive
        p.down += d.length;
        client.write(d);
      });
      const end = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('close', end);
      upstream.on('close', end);
      client.on('error', end);
      upstream.on('error', end);
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    return (this.#server.address() as { port: number }).port;
  }

  close(): void {
    for (const p of this.conns) {
      p.client.destroy();
      p.upstream.destroy();
    }
    this.#server.close();
  }
}

/** `ep` with its link address pointing at `port` (the proxy in front of its listener). */
function via(ep: SoftEndpoint, port: number): SoftEndpoint {
  return { ...ep, tcp: { ...(ep.tcp as NonNullable<SoftEndpoint['tcp']>), port } };
}

/** A raw connection to `ep`'s listener, authenticated with its key (as its peer can). */
async function authenticatedTo(ep: SoftEndpoint): Promise<Socket> {
  const tcp = ep.tcp as NonNullable<SoftEndpoint['tcp']>;
  const sock = dial(tcp.port, '127.0.0.1');
  let got = Buffer.alloc(0);
  sock.on('data', (d: Buffer) => {
    got = Buffer.concat([got, d]);
  });
  sock.on('error', () => undefined);
  const hs = new InitiatorHandshake(Buffer.from(tcp.key, 'base64url'), ep);
  await until(() => got.length >= HELLO_BYTES, 'HELLO');
  sock.write(hs.answer(got.subarray(0, HELLO_BYTES)) as Buffer);
  await until(() => got.length >= HELLO_BYTES + WELCOME_BYTES, 'WELCOME');
  expect(hs.verify(got.subarray(HELLO_BYTES, HELLO_BYTES + WELCOME_BYTES))).toBe(true);
  return sock;
}

describe.runIf(providers.includes('soft'))('soft TCP link: answers on the way back', () => {
  let cleanup: (() => void) | undefined;
  afterEach(() => {
    cleanup?.();
    cleanup = undefined;
  });

  /** Two link devices whose QPs reach each other through proxies (pa in front of a's listener). */
  async function proxied(o: { timeout?: number; retryCount?: number } = {}) {
    const da = openDevice({ provider: 'soft', link: 'tcp' });
    const db = openDevice({ provider: 'soft', link: 'tcp' });
    const la = await da.listen();
    const lb = await db.listen();
    const pa = new CountingProxy(la.port);
    const pb = new CountingProxy(lb.port);
    const a: Side = sideOn(da);
    const b: Side = sideOn(db);
    cleanup = () => {
      da.close();
      db.close();
      pa.close();
      pb.close();
    };
    const ea = via(a.qp.endpoint() as SoftEndpoint, await pa.listen());
    const eb = via(b.qp.endpoint() as SoftEndpoint, await pb.listen());
    const opts = {
      ...(o.timeout === undefined ? {} : { timeout: o.timeout }),
      ...(o.retryCount === undefined ? {} : { retryCount: o.retryCount }),
    };
    a.qp.connect(eb, opts);
    b.qp.connect(ea, opts);
    /**
     * The pair's one connection once it is up: `bSide` is the proxy's socket on b's side
     * (pausing it holds what b sends to a), `aToB` the bytes a sent on it so far.
     */
    const pair = async () => {
      await until(() => pa.conns.length + pb.conns.length > 0, 'the connection');
      const viaA = pa.conns.length > 0; // b dialed a's listener
      const p = (viaA ? pa.conns[0] : pb.conns[0]) as Piped;
      return {
        p,
        bSide: viaA ? p.client : p.upstream,
        aToB: () => (viaA ? p.down : p.up),
        bToA: () => (viaA ? p.up : p.down),
      };
    };
    return { a, b, pa, pb, pair };
  }

  it("one_connection_per_pair: a ping-pong carries both QPs' requests and answers on one connection", async () => {
    const { a, b, pa, pb, pair } = await proxied();
    const rounds = 30;
    for (let i = 0; i < rounds; i++) {
      b.qp.postRecv({ wrId: 100 + i, sgList: [b.mr.sge(0, 64)] });
      a.qp.postRecv({ wrId: 200 + i, sgList: [a.mr.sge(64, 64)] });
    }
    const sent = { a: 0, b: 0 };
    /** The next RECV on `side`'s CQ; send completions met meanwhile are counted. */
    async function nextRecv(side: Side, who: 'a' | 'b') {
      for (;;) {
        const w = (await collect(side.cq, 1))[0];
        expect(w?.status).toBe('SUCCESS');
        if (w?.opcode === 'RECV') return w;
        sent[who]++;
      }
    }
    for (let i = 0; i < rounds; i++) {
      a.qp.postSend({ wrId: i, opcode: 'SEND', sgList: [a.mr.sge(128, 64)] });
      expect((await nextRecv(b, 'b')).wrId).toBe(100 + i);
      b.qp.postSend({ wrId: 1000 + i, opcode: 'SEND', sgList: [b.mr.sge(128, 64)] });
      expect((await nextRecv(a, 'a')).wrId).toBe(200 + i);
    }
    // Every SEND completed: the answers arrived too.
    const rest = async (side: Side, who: 'a' | 'b') => {
      const left = rounds - sent[who];
      if (left > 0)
        expect((await collect(side.cq, left)).every((w) => w.opcode === 'SEND')).toBe(true);
    };
    await rest(a, 'a');
    await rest(b, 'b');
    // One connection for the pair, dialed by one of them: requests and answers went both
    // ways on it (a 64 B SEND's frame is 116 B, an answer 12 B).
    expect(pa.conns.length + pb.conns.length).toBe(1);
    const c = await pair();
    expect(c.aToB()).toBeGreaterThan(rounds * (116 + 12));
    expect(c.bToA()).toBeGreaterThan(rounds * (116 + 12));
  });

  it('answers_lost_with_their_connection: the window is sent again and completes in order, each WR run once', async () => {
    const { a, b, pa, pb, pair } = await proxied({ timeout: 14 }); // ≈ 67 ms per try
    const n = 12;
    for (let i = 0; i < n; i++) b.qp.postRecv({ wrId: 100 + i, sgList: [b.mr.sge(64 * i, 64)] });
    // b's connection to a (through pa) comes up first: a ping from b, answered by a.
    a.qp.postRecv({ wrId: 500, sgList: [a.mr.sge(0, 64)] });
    b.qp.postSend({ wrId: 50, opcode: 'SEND', sgList: [b.mr.sge(0, 8)] });
    expect((await collect(a.cq, 1))[0]).toMatchObject({ wrId: 500, status: 'SUCCESS' });
    const c = await pair();
    // Cut b's answers to a's requests: whatever b sends to a is held from here on.
    const backBefore = c.bToA();
    const cut = new Promise<void>((r) => c.p.upstream.once('close', () => r()));
    c.bSide.pause(); // b's writes stop reaching a
    for (let i = 0; i < n; i++) {
      a.mr.bytes[1024 + i] = i;
      a.qp.postSend({ wrId: i, opcode: 'SEND', sgList: [a.mr.sge(1024 + i, 1)] });
    }
    // b ran them all (its receives are consumed in order) and answered on its connection back.
    const recvs = await collect(b.cq, n + 1);
    const got = recvs.filter((w) => w.opcode === 'RECV');
    expect(got.map((w) => w.wrId)).toEqual(Array.from({ length: n }, (_, i) => 100 + i));
    await sleep(20);
    expect(c.bToA()).toBe(backBefore); // nothing of it reached a
    c.p.client.destroy(); // the connection carrying the answers is lost
    await cut;
    // a sends the window again over a new connection; b answers from memory: every WR
    // completes, in order, and none ran twice.
    const wcs = await collect(a.cq, n, 10_000);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual(
      Array.from({ length: n }, (_, i) => [i, 'SUCCESS']),
    );
    await sleep(100);
    expect(b.cq.pending()).toBe(0);
    for (let i = 0; i < n; i++) expect(b.mr.bytes[64 * i]).toBe(i);
    expect(pa.conns.length + pb.conns.length).toBe(2);
  });

  it('answers_lost_only_with_the_newest_connection: another connection bound to the QP closing abandons nothing', async () => {
    // No retry to spare (a request abandoned fails at once) and a long ACK timeout (≈ 4.3 s).
    const { a, b, pair } = await proxied({ timeout: 20, retryCount: 0 });
    // b's connection to a (through pa) comes up: a ping from b, answered by a.
    a.qp.postRecv({ wrId: 500, sgList: [a.mr.sge(0, 64)] });
    b.qp.postSend({ wrId: 50, opcode: 'SEND', sgList: [b.mr.sge(0, 8)] });
    expect((await collect(a.cq, 1))[0]).toMatchObject({ wrId: 500, status: 'SUCCESS' });
    expect((await collect(b.cq, 1))[0]).toMatchObject({ wrId: 50, status: 'SUCCESS' });
    const c = await pair();
    // Two more connections bound to a's QP (what its peer can open, holding its key, though
    // it proves no key of its own: a does not send on them): the newest is the last of them.
    const ea = a.qp.endpoint() as SoftEndpoint;
    const r1 = await authenticatedTo(ea);
    const r2 = await authenticatedTo(ea);
    // a's SEND runs at b; its answer is held on b's connection.
    c.bSide.pause();
    b.qp.postRecv({ wrId: 100, sgList: [b.mr.sge(0, 64)] });
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(128, 8)] });
    expect((await collect(b.cq, 1))[0]).toMatchObject({ wrId: 100, status: 'SUCCESS' });
    const sent = c.aToB();
    // An older connection closing carries none of the answers on their way: a's window is
    // not given up (it would be sent again once the ACK timer ran).
    r1.destroy();
    await new Promise<void>((r) => r1.once('close', () => r()));
    await sleep(100);
    expect(a.cq.pending()).toBe(0);
    // The answer gets through: the SEND completes on its first frame, never sent again.
    c.bSide.resume();
    expect((await collect(a.cq, 1))[0]).toMatchObject({ wrId: 1, status: 'SUCCESS' });
    expect(c.aToB()).toBe(sent);
    r2.destroy();
  });

  it("peer_that_never_dials: the QP left to adopt its peer's connection dials its own after ADOPT_WAIT_MS", async () => {
    const da = openDevice({ provider: 'soft', link: 'tcp' });
    const db = openDevice({ provider: 'soft', link: 'tcp' });
    await da.listen();
    await db.listen();
    const x = sideOn(da);
    const y = sideOn(db);
    cleanup = () => {
      da.close();
      db.close();
    };
    const ex = x.qp.endpoint() as SoftEndpoint;
    const ey = y.qp.endpoint() as SoftEndpoint;
    // The lower key dials: make `d` the dialer and `w` the QP that waits for it.
    const xDials = (ex.tcp?.key as string) <= (ey.tcp?.key as string);
    const [d, w, ed, ew] = xDials ? [x, y, ex, ey] : [y, x, ey, ex];
    // The dialer's connection never arrives: it dials a port nobody listens on.
    const dead = createServer();
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
    const deadPort = (dead.address() as { port: number }).port;
    await new Promise<void>((r) => dead.close(() => r()));
    d.qp.connect(via(ew, deadPort));
    w.qp.connect(ed);
    d.qp.postRecv({ wrId: 7, sgList: [d.mr.sge(0, 64)] });
    const t0 = performance.now();
    w.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [w.mr.sge(0, 8)] });
    expect((await collect(w.cq, 1))[0]).toMatchObject({ wrId: 1, status: 'SUCCESS' });
    expect((await collect(d.cq, 1))[0]).toMatchObject({ wrId: 7, status: 'SUCCESS' });
    // It waited for the peer's connection first (bounded), then went over its own.
    expect(performance.now() - t0).toBeGreaterThanOrEqual(ADOPT_WAIT_MS - 5);
  });

  it('answer_for_nothing_asked_on_a_connection_back_is_dropped: an authenticated peer cannot complete what was not sent', async () => {
    const p = await linkPair();
    cleanup = () => p.close();
    const ea = p.a.qp.endpoint() as SoftEndpoint;
    const tcp = ea.tcp as NonNullable<SoftEndpoint['tcp']>;
    // A raw peer holding a's key (as b's side does) dials a's listener.
    const sock = dial(tcp.port, '127.0.0.1');
    let got = Buffer.alloc(0);
    sock.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
    });
    sock.on('error', () => undefined);
    const closed = new Promise<void>((r) => sock.once('close', () => r()));
    const hs = new InitiatorHandshake(Buffer.from(tcp.key, 'base64url'), ea);
    await until(() => got.length >= HELLO_BYTES, 'HELLO');
    sock.write(hs.answer(got.subarray(0, HELLO_BYTES)) as Buffer);
    await until(() => got.length >= HELLO_BYTES + WELCOME_BYTES, 'WELCOME');
    expect(hs.verify(got.subarray(HELLO_BYTES, HELLO_BYTES + WELCOME_BYTES))).toBe(true);
    // An answer to a request a never sent: the connection is dropped, nothing completes.
    const bogus = Buffer.alloc(RES_HEADER);
    bogus.writeUInt32LE((ANSWER_BIT | RES_HEADER) >>> 0, 0);
    bogus.writeUInt32LE(0x7fff_0000, 4);
    bogus.writeUInt8(ABI.LINK_DONE, 8);
    sock.write(bogus);
    await closed;
    expect(p.a.cq.pending()).toBe(0);
    // The real pair carries on.
    p.b.qp.postRecv({ wrId: 9, sgList: [p.b.mr.sge(0, 64)] });
    p.a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [p.a.mr.sge(0, 4)] });
    expect((await collect(p.a.cq, 1))[0]).toMatchObject({ wrId: 1, status: 'SUCCESS' });
    expect((await collect(p.b.cq, 1))[0]).toMatchObject({ wrId: 9, status: 'SUCCESS' });
  });
});

// The soft TCP link as an attacker meets it: a raw TCP client that holds no link key, or
// holds one QP's key and sends hostile frames, or names another QP. The device never acts on an
// unauthenticated byte, never buffers more than a frame's header before checking it,
// keeps its memory bounded, and keeps serving everyone else.
import { execFile } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { type SoftEndpoint, WC_STATUSES } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import {
  answerLength,
  FLAG_HEAD,
  FLAG_SOLICITED,
  LINK_PROGRESS,
  PROGRESS_BYTES,
  REQ_HEADER,
  RES_HEADER,
} from '../src/internal/soft/link/frames.js';
import {
  AUTH_BYTES,
  HELLO_BYTES,
  InitiatorHandshake,
  WELCOME_BYTES,
} from '../src/internal/soft/link/handshake.js';
import { collect, linkPair, type Pair, providers, sleep, until } from './harness/pair.js';

interface Raw {
  sock: Socket;
  closed: Promise<void>;
  received: () => Buffer;
}

function raw(port: number): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const sock = connect(port, '127.0.0.1', () =>
      resolve({ sock, closed, received: () => Buffer.concat(chunks) }),
    );
    const closed = new Promise<void>((r) => sock.once('close', () => r()));
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.on('error', () => undefined);
    sock.once('error', reject);
  });
}

/** A raw client that completes the handshake with `key` for QP `ep` (what its peer can do). */
async function authenticated(port: number, key: string, ep: SoftEndpoint): Promise<Raw> {
  const r = await raw(port);
  const hs = new InitiatorHandshake(Buffer.from(key, 'base64url'), ep);
  const deadline = Date.now() + 5000;
  while (r.received().length < HELLO_BYTES) {
    if (Date.now() > deadline) throw new Error('no HELLO');
    await sleep(1);
  }
  r.sock.write(hs.answer(r.received().subarray(0, HELLO_BYTES)) as Buffer);
  while (r.received().length < HELLO_BYTES + WELCOME_BYTES) {
    if (Date.now() > deadline) throw new Error('no WELCOME');
    await sleep(1);
  }
  expect(hs.verify(r.received().subarray(HELLO_BYTES, HELLO_BYTES + WELCOME_BYTES))).toBe(true);
  return r;
}

/** A well-formed request frame aimed at `ep`'s QP. */
function request(
  ep: SoftEndpoint,
  o: { opcode?: number; length?: number; payload?: number; token?: number; flags?: number } = {},
): Buffer {
  const opcode = o.opcode ?? ABI.OP_SEND;
  const length = o.length ?? 8;
  const payload = o.payload ?? (opcode === ABI.OP_RDMA_READ ? 0 : length);
  const f = Buffer.alloc(REQ_HEADER + payload);
  f.writeUInt32LE(REQ_HEADER + payload, 0);
  f.writeUInt32LE(1, 4);
  f.writeUInt8(opcode, 8);
  // The head of its QP's window by default: run, not discarded for coming out of order.
  f.writeUInt8(o.flags ?? FLAG_HEAD, 9);
  f.writeUInt32LE(length, 28);
  f.writeUInt32LE(ep.slot, 32);
  f.writeUInt32LE(ep.gen, 36);
  f.writeUInt32LE(ep.qpn, 40);
  f.writeUInt32LE(ep.pid, 44);
  f.writeUInt32LE(o.token ?? 1, 48);
  return f;
}

/**
 * ArrayBuffer bytes still referenced: collected first, so garbage does not count. Twice, a
 * moment apart: V8 frees the memory of dead ArrayBuffers on a background sweeper, which the
 * figure lags behind.
 */
async function retainedArrayBuffers(): Promise<number> {
  v8.setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  await sleep(50);
  gc();
  return process.memoryUsage().arrayBuffers;
}

const within = (p: Promise<void>, ms: number) =>
  Promise.race([p.then(() => true), sleep(ms).then(() => false)]);

describe.runIf(providers.includes('soft'))('the soft TCP link under attack', () => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  async function target() {
    return linkTarget();
  }

  async function linkTarget(mrBytes?: number) {
    p = await linkPair(mrBytes === undefined ? {} : { mrBytes });
    const ep = p.b.qp.endpoint() as SoftEndpoint;
    const tcp = ep.tcp as { port: number; key: string };
    p.b.qp.postRecv({ wrId: 9, sgList: [p.b.mr.sge(0, 64)] });
    return { ep, port: tcp.port, key: tcp.key, pair: p };
  }

  /** The pair still works: a SEND over the link lands in b's posted receive. */
  async function stillServes(pair: Pair): Promise<void> {
    pair.a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [pair.a.mr.sge(0, 4)] });
    expect((await collect(pair.a.cq, 1))[0]?.status).toBe('SUCCESS');
    expect((await collect(pair.b.cq, 1))[0]).toMatchObject({ wrId: 9, status: 'SUCCESS' });
  }

  it('link_refuses_unauthenticated_peer: frames without a handshake, or after a wrong one, do nothing', async () => {
    const { ep, port, pair } = await target();
    // No handshake at all: a well-formed SEND straight away.
    const skip = await raw(port);
    skip.sock.write(request(ep));
    expect(await within(skip.closed, 2000)).toBe(true);
    // A handshake with the wrong secret, then the same SEND.
    const wrong = await authenticatedWrongKey(port);
    wrong.sock.write(request(ep));
    expect(await within(wrong.closed, 2000)).toBe(true);
    await sleep(20);
    expect(pair.b.cq.pending()).toBe(0); // the posted receive was not consumed
    expect(pair.b.qp.state).toBe('rts');
    await stillServes(pair);
  });

  // Needs root to become another user (CI runs as root).
  it.runIf(process.getuid?.() === 0)(
    'link_refuses_other_users_on_loopback: not even the challenge is sent',
    async () => {
      const { port, pair } = await target();
      const script = `const s = require('net').connect(${port}, '127.0.0.1'); let n = 0;
        s.on('data', (d) => { n += d.length; }); s.on('error', () => {});
        s.on('close', () => { console.log(n); process.exit(0); });
        setTimeout(() => { console.log('open'); process.exit(0); }, 3000);`;
      const out = await new Promise<string>((resolve, reject) =>
        execFile(
          'setpriv',
          ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', script],
          (err, stdout) => (err ? reject(err) : resolve(stdout.trim())),
        ),
      );
      expect(out).toBe('0'); // closed at once, and no HELLO reached the other user
      await stillServes(pair);
    },
  );

  it('link_survives_fuzzed_unauthenticated_streams: seeded random bytes never crash it or reach a QP', async () => {
    const { port, pair } = await target();
    const started = Date.now();
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 512 }), async (bytes) => {
        const r = await raw(port);
        r.sock.write(bytes);
        r.sock.end();
        await within(r.closed, 1000);
        r.sock.destroy();
        cases++;
      }),
      { numRuns: 2000, seed: 20261203, interruptAfterTimeLimit: 10_000 },
    );
    expect(cases).toBeGreaterThan(100);
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(pair.b.cq.pending()).toBe(0);
    expect(pair.b.qp.state).toBe('rts');
    await stillServes(pair);
  });

  it('oversized_frame_is_refused_before_buffering: a 1 GiB header is dropped before its payload', async () => {
    const { ep, port, key, pair } = await target();
    const r = await authenticated(port, key, ep);
    const header = request(ep, { length: 1 << 30, payload: 0 });
    header.writeUInt32LE(REQ_HEADER + (1 << 30), 0); // claims a gigabyte follows
    r.sock.write(header);
    expect(await within(r.closed, 2000)).toBe(true); // without a byte of the payload sent
    await stillServes(pair);
  });

  it('hostile_frames_from_an_authenticated_peer_never_crash_the_device', async () => {
    const { ep, port, key, pair } = await target();
    let dropped = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          opcode: fc.integer({ min: 0, max: 255 }),
          length: fc.oneof(fc.integer({ min: 0, max: 64 }), fc.constant(2 ** 32 - 1)),
          remoteAddr: fc.oneof(fc.double(), fc.constant(Number.NaN), fc.nat()),
          rkey: fc.nat(),
          slot: fc.oneof(fc.constant(ep.slot), fc.nat()),
          gen: fc.oneof(fc.constant(ep.gen), fc.nat()),
          lenDelta: fc.integer({ min: -8, max: 8 }),
          flags: fc.oneof(fc.constant(FLAG_HEAD), fc.integer({ min: 0, max: 255 })),
        }),
        async (h) => {
          const r = await authenticated(port, key, ep);
          const payload = Math.min(h.length, 64);
          const f = request(ep, { opcode: h.opcode, length: h.length, payload, flags: h.flags });
          f.writeUInt32LE(Math.max(0, f.length + h.lenDelta), 0);
          f.writeDoubleLE(h.remoteAddr, 16);
          f.writeUInt32LE(h.rkey, 24);
          f.writeUInt32LE(h.slot, 32);
          f.writeUInt32LE(h.gen, 36);
          r.sock.write(f);
          if (await within(r.closed, 50)) dropped++;
          r.sock.destroy();
        },
      ),
      { numRuns: 1000, seed: 7, interruptAfterTimeLimit: 10_000 },
    );
    expect(dropped).toBeGreaterThan(0); // malformed ones were refused
    // b's QP may have been moved to error by a hostile but well-formed access: that is RC.
    expect(['rts', 'error']).toContain(pair.b.qp.state);
  });

  it('window_order_from_a_peer: out-of-order frames are discarded unrun, a head resumes, replays come from memory', async () => {
    const { ep, port, key, pair } = await target();
    pair.b.qp.postRecv(
      [10, 11, 12].map((wrId) => ({ wrId, sgList: [pair.b.mr.sge(64 * wrId, 64)] })),
    );
    const r = await authenticated(port, key, ep);
    const base = HELLO_BYTES + WELCOME_BYTES;
    let reqId = 0;
    /** Sends a SEND frame and returns its answer: [reqId, outcome, status]. */
    async function send(token: number, flags: number): Promise<number[]> {
      const f = request(ep, { token, flags });
      f.writeUInt32LE(++reqId, 4);
      f.writeUInt32LE(pair.a.qp.qpn, 40); // as a's QP (the target checks its peer)
      r.sock.write(f);
      const deadline = Date.now() + 5000;
      while (r.received().length < base + reqId * RES_HEADER) {
        if (Date.now() > deadline) throw new Error(`no answer to request ${reqId}`);
        await sleep(1);
      }
      const a = r.received().subarray(base + (reqId - 1) * RES_HEADER);
      expect(answerLength(a, 0)).toBe(RES_HEADER);
      return [a.readUInt32LE(4), a.readUInt8(8), a.readUInt8(9)];
    }
    const { LINK_DONE: DONE, LINK_DISCARDED: DISCARDED } = ABI;
    expect(await send(5, 0)).toEqual([1, DISCARDED, 0]); // nothing ran before it
    expect(await send(5, FLAG_HEAD)).toEqual([2, DONE, 0]);
    expect(await send(7, 0)).toEqual([3, DISCARDED, 0]); // 6 is missing
    expect(await send(6, 0)).toEqual([4, DONE, 0]);
    expect(await send(5, FLAG_HEAD)).toEqual([5, DONE, 0]); // a replay: answered, not run
    expect(await send(6, 0)).toEqual([6, DONE, 0]);
    expect(await send(7, 0)).toEqual([7, DONE, 0]);
    // Three receives consumed, by tokens 5, 6, 7 in that order: none twice, none skipped.
    const recvs = await collect(pair.b.cq, 3);
    expect(recvs.map((w) => w.wrId)).toEqual([9, 10, 11]);
    await sleep(50);
    expect(pair.b.cq.pending()).toBe(0);
    // Flag bits nobody defined: the frame is malformed and the connection dropped.
    const bad = request(ep, { token: 8, flags: 0x80 | FLAG_HEAD });
    bad.writeUInt32LE(pair.a.qp.qpn, 40);
    r.sock.write(bad);
    expect(await within(r.closed, 5000)).toBe(true);
    expect(pair.b.cq.pending()).toBe(0);
    // The real initiator carries on (its own head token runs; it consumes the next receive).
    pair.a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [pair.a.mr.sge(0, 4)] });
    expect((await collect(pair.a.cq, 1))[0]?.status).toBe('SUCCESS');
    expect((await collect(pair.b.cq, 1))[0]).toMatchObject({ wrId: 12, status: 'SUCCESS' });
  });

  it('solicited_flag_from_a_peer: wakes a solicited-only arm on a SEND, is malformed on a WRITE', async () => {
    const { ep, port, key, pair } = await target();
    pair.b.qp.postRecv({ wrId: 21, sgList: [pair.b.mr.sge(64, 64)] }); // after target()'s 9
    const r = await authenticated(port, key, ep);
    let woke = 0;
    pair.b.cq.on('completion', () => woke++);
    pair.b.cq.requestNotify({ solicitedOnly: true });
    /** Sends a frame as a's QP (the target checks its peer) and waits for its answer. */
    async function sendAsA(f: Buffer, reqId: number): Promise<void> {
      f.writeUInt32LE(reqId, 4);
      f.writeUInt32LE(pair.a.qp.qpn, 40);
      r.sock.write(f);
      await until(
        () => r.received().length >= HELLO_BYTES + WELCOME_BYTES + reqId * RES_HEADER,
        `an answer to request ${reqId}`,
      );
    }
    await sendAsA(request(ep, { token: 1 }), 1); // unsolicited: queued, no wake-up
    await sendAsA(request(ep, { token: 2, flags: 0 }), 2);
    await sleep(20);
    expect([woke, pair.b.cq.pending()]).toEqual([0, 2]);
    const recvs = await collect(pair.b.cq, 2);
    expect(recvs.map((w) => w.wrId)).toEqual([9, 21]);
    pair.b.qp.postRecv({ wrId: 22, sgList: [pair.b.mr.sge(128, 64)] });
    pair.b.cq.requestNotify({ solicitedOnly: true });
    await sendAsA(request(ep, { token: 3, flags: FLAG_SOLICITED }), 3);
    await until(() => woke === 1, 'the solicited SEND to wake the arm');
    expect((await collect(pair.b.cq, 1))[0]).toMatchObject({ wrId: 22, status: 'SUCCESS' });
    // On an operation that completes no receive the flag means nothing: malformed, dropped.
    const bad = request(ep, {
      token: 4,
      opcode: ABI.OP_RDMA_WRITE,
      flags: FLAG_SOLICITED,
    });
    bad.writeUInt32LE(pair.a.qp.qpn, 40);
    r.sock.write(bad);
    expect(await within(r.closed, 5000)).toBe(true);
    expect(pair.b.cq.pending()).toBe(0);
  });

  it("link_refuses_a_peer_speaking_for_another_qp: one QP's key reaches that QP only", async () => {
    const { ep, port, pair } = await target();
    // The attacker is a legitimate peer of another QP of b's device: it holds that QP's
    // endpoint, so its key, and knows ep (b's QP connected to a) and a's QP number.
    const other = pair.b.pd.createQp({ sendCq: pair.b.cq, recvCq: pair.b.cq });
    const mine = other.endpoint() as SoftEndpoint;
    const myKey = (mine.tcp as { key: string }).key;
    expect(myKey).not.toBe((ep.tcp as { key: string }).key);
    // Its key does not open a connection to ep's QP: no WELCOME, dropped.
    const named = await raw(port);
    const deadline = Date.now() + 5000;
    while (named.received().length < HELLO_BYTES) {
      if (Date.now() > deadline) throw new Error('no HELLO');
      await sleep(1);
    }
    const hs = new InitiatorHandshake(Buffer.from(myKey, 'base64url'), ep);
    named.sock.write(hs.answer(named.received().subarray(0, HELLO_BYTES)) as Buffer);
    expect(await within(named.closed, 2000)).toBe(true);
    expect(named.received().length).toBe(HELLO_BYTES);
    // A connection bound to its own QP cannot address ep's: a SEND as a's QP, carrying the
    // token a's next SEND will carry (so that a cached answer would swallow it), is dropped.
    // A fresh QP's send sequence starts at 2^32 − 16 (native soft/device.h, kSendSeqStart):
    // its first WR's token is 2^32 − 15.
    const r = await authenticated(port, myKey, mine);
    const f = request(ep, { token: 2 ** 32 - 15 });
    f.writeUInt32LE(pair.a.qp.qpn, 40);
    f.writeUInt32LE((pair.a.qp.endpoint() as SoftEndpoint).pid, 44);
    r.sock.write(f);
    expect(await within(r.closed, 2000)).toBe(true);
    await sleep(20);
    expect(pair.b.cq.pending()).toBe(0); // b's posted receive was not consumed
    expect(pair.b.qp.state).toBe('rts');
    // a's own first SEND runs and lands (not answered from anything the attacker caused).
    await stillServes(pair);
    other.close();
  });

  it('resend_that_differs_from_the_answered_wr_is_refused: a token answers one WR only', async () => {
    const { ep, port, key, pair } = await target();
    const r = await authenticated(port, key, ep);
    const base = HELLO_BYTES + WELCOME_BYTES;
    const first = request(ep, { token: 3 });
    first.writeUInt32LE(pair.a.qp.qpn, 40);
    r.sock.write(first);
    const deadline = Date.now() + 5000;
    while (r.received().length < base + RES_HEADER) {
      if (Date.now() > deadline) throw new Error('no answer');
      await sleep(1);
    }
    expect(r.received().readUInt8(base + 8)).toBe(ABI.LINK_DONE);
    expect((await collect(pair.b.cq, 1))[0]).toMatchObject({ wrId: 9, byteLen: 8 });
    // Same token, another WR (a WRITE): not a resend, so no cached answer — dropped.
    const other = request(ep, { token: 3, opcode: ABI.OP_RDMA_WRITE, length: 4 });
    other.writeUInt32LE(pair.a.qp.qpn, 40);
    other.writeDoubleLE(pair.b.mr.addr, 16);
    other.writeUInt32LE(pair.b.mr.rkey, 24);
    r.sock.write(other);
    expect(await within(r.closed, 2000)).toBe(true);
    expect(r.received().length).toBe(base + RES_HEADER);
  });

  it('large_request_reports_progress_while_it_arrives: the ACK timer measures silence', async () => {
    const { ep, port, key, pair } = await target();
    const r = await authenticated(port, key, ep);
    const base = HELLO_BYTES + WELCOME_BYTES;
    const length = 4 * PROGRESS_BYTES;
    const f = request(ep, { opcode: ABI.OP_RDMA_WRITE, length, token: 1 });
    f.writeUInt32LE(7, 4); // reqId
    f.writeUInt32LE(pair.a.qp.qpn, 40);
    f.writeDoubleLE(pair.b.mr.addr, 16);
    f.writeUInt32LE(pair.b.mr.rkey, 24);
    const answers = () => {
      const out: number[][] = [];
      const got = r.received().subarray(base);
      for (let o = 0; o + RES_HEADER <= got.length; o += answerLength(got, o)) {
        out.push([got.readUInt32LE(o + 4), got.readUInt8(o + 8)]);
      }
      return out;
    };
    // Sent a quarter at a time, waiting for the target to report each.
    const quarter = (f.length - REQ_HEADER) / 4;
    for (let q = 0; q < 4; q++) {
      const end = q === 3 ? f.length : REQ_HEADER + (q + 1) * quarter;
      r.sock.write(f.subarray(q === 0 ? 0 : REQ_HEADER + q * quarter, end));
      if (q < 3) await until(() => answers().length >= q + 1, `progress report ${q + 1}`);
    }
    await until(() => answers().at(-1)?.[1] === ABI.LINK_DONE, 'the answer');
    const all = answers();
    expect(all.slice(0, -1).length).toBeGreaterThanOrEqual(3);
    expect(all.slice(0, -1).every(([id, outcome]) => id === 7 && outcome === LINK_PROGRESS)).toBe(
      true,
    );
    expect(all.at(-1)).toEqual([7, ABI.LINK_DONE]);
  });

  /** An RDMA WRITE frame from a's QP into b's region at `off` (reqId `id`), `fill` repeated. */
  function writeFrame(
    ep: SoftEndpoint,
    pair: Pair,
    o: {
      id: number;
      token: number;
      off: number;
      length: number;
      fill: number;
      flags?: number;
      rkey?: number;
    },
  ) {
    const f = request(ep, {
      opcode: ABI.OP_RDMA_WRITE,
      length: o.length,
      token: o.token,
      flags: o.flags ?? FLAG_HEAD,
    });
    f.writeUInt32LE(o.id, 4);
    f.writeUInt32LE(pair.a.qp.qpn, 40);
    f.writeDoubleLE(pair.b.mr.addr + o.off, 16);
    f.writeUInt32LE(o.rkey ?? pair.b.mr.rkey, 24);
    f.fill(o.fill, REQ_HEADER);
    return f;
  }

  /** The final answers (not PROGRESS) after the handshake: [reqId, outcome, status]. */
  function finalAnswers(r: Raw): number[][] {
    const out: number[][] = [];
    const got = r.received().subarray(HELLO_BYTES + WELCOME_BYTES);
    for (let o = 0; o + RES_HEADER <= got.length; o += answerLength(got, o)) {
      if (got.readUInt8(o + 8) !== LINK_PROGRESS)
        out.push([got.readUInt32LE(o + 4), got.readUInt8(o + 8), got.readUInt8(o + 9)]);
    }
    return out;
  }

  it('write_placed_as_it_arrives: a WRITE spanning many reads lands whole, in order, and a bad one places nothing', async () => {
    const { ep, port, key, pair } = await linkTarget(4 << 20);
    const r = await authenticated(port, key, ep);
    const length = 3 << 20;
    const first = writeFrame(ep, pair, { id: 1, token: 1, off: 0, length, fill: 0xa1 });
    // Arrives in uneven pieces, the header split too: placed piece by piece as they come.
    const cuts = [20, REQ_HEADER + 1, 70_000, 1 << 20, first.length];
    for (let i = 0, from = 0; i < cuts.length; from = cuts[i] as number, i++) {
      r.sock.write(first.subarray(from, cuts[i]));
      await sleep(5);
    }
    await until(() => finalAnswers(r).length === 1, 'the answer to the first WRITE');
    expect(finalAnswers(r)).toEqual([[1, ABI.LINK_DONE, 0]]);
    const b = pair.b.mr.bytes;
    expect(b.subarray(0, length).every((x) => x === 0xa1)).toBe(true);
    expect(b[length]).toBe(0);
    // A second WRITE over part of it, pipelined right behind a third: the last one wins.
    const second = writeFrame(ep, pair, {
      id: 2,
      token: 2,
      off: 4096,
      length: 1 << 20,
      fill: 0xb2,
      flags: 0,
    });
    const third = writeFrame(ep, pair, {
      id: 3,
      token: 3,
      off: 8192,
      length: 1 << 20,
      fill: 0xc3,
      flags: 0,
    });
    r.sock.write(Buffer.concat([second, third]));
    await until(() => finalAnswers(r).length === 3, 'the answers to the pipelined WRITEs');
    expect(finalAnswers(r).slice(1)).toEqual([
      [2, ABI.LINK_DONE, 0],
      [3, ABI.LINK_DONE, 0],
    ]);
    expect([
      b[4095],
      b[4096],
      b[8191],
      b[8192],
      b[8192 + (1 << 20) - 1],
      b[8192 + (1 << 20)],
    ]).toEqual([0xa1, 0xb2, 0xb2, 0xc3, 0xc3, 0xa1]);
    // Past the region's end: refused whole, not even its in-bounds part is written.
    const over = writeFrame(ep, pair, {
      id: 4,
      token: 4,
      off: (4 << 20) - 4096,
      length: 1 << 20,
      fill: 0xd4,
    });
    r.sock.write(over.subarray(0, 100_000));
    await sleep(5);
    r.sock.write(over.subarray(100_000));
    await until(() => finalAnswers(r).length === 4, 'the answer to the WRITE out of bounds');
    expect(finalAnswers(r)[3]).toEqual([4, ABI.LINK_DONE, WC_STATUSES.indexOf('REM_ACCESS_ERR')]);
    expect(b.subarray((4 << 20) - 4096).every((x) => x === 0xa1 || x === 0)).toBe(true);
  });

  it('write_placed_as_it_arrives_stops_on_deregistration: later pieces land nowhere, the WRITE fails as on a NIC', async () => {
    const { ep, port, key, pair } = await linkTarget(4 << 20);
    const r = await authenticated(port, key, ep);
    const f = writeFrame(ep, pair, { id: 1, token: 1, off: 0, length: 2 << 20, fill: 0xe5 });
    r.sock.write(f.subarray(0, 300_000));
    await until(() => pair.b.mr.bytes[100_000] === 0xe5, 'the first pieces in place');
    pair.b.mr.deregister();
    r.sock.write(f.subarray(300_000));
    await until(() => finalAnswers(r).length === 1, 'the answer');
    expect(finalAnswers(r)).toEqual([[1, ABI.LINK_DONE, WC_STATUSES.indexOf('REM_ACCESS_ERR')]]);
  });

  it('stale_connection_stops_placing: a WRITE arriving on a connection the initiator left lands nothing after the new one ran', async () => {
    const { ep, port, key, pair } = await linkTarget(4 << 20);
    const old = await authenticated(port, key, ep);
    const cur = await authenticated(port, key, ep);
    const length = 2 << 20;
    const late = writeFrame(ep, pair, { id: 1, token: 1, off: 0, length, fill: 0x11 });
    old.sock.write(late.subarray(0, 200_000));
    await until(() => pair.b.mr.bytes[100_000] === 0x11, 'the old connection placing');
    // The initiator sends the window again over its new connection: it runs there.
    cur.sock.write(writeFrame(ep, pair, { id: 1, token: 1, off: 0, length, fill: 0x22 }));
    await until(() => finalAnswers(cur).length === 1, 'the answer on the new connection');
    expect(finalAnswers(cur)).toEqual([[1, ABI.LINK_DONE, 0]]);
    // The rest of the old frame arrives: none of it lands, and that connection is dropped.
    old.sock.write(late.subarray(200_000));
    expect(await within(old.closed, 5000)).toBe(true);
    expect(pair.b.mr.bytes.subarray(0, length).every((x) => x === 0x22)).toBe(true);
    expect(finalAnswers(old)).toEqual([]);
  });

  it('reads_share_one_buffer: a connection whose answers back up keeps what it read while another reads into the same buffer', async () => {
    const { ep, port, key, pair } = await linkTarget(64 << 10);
    const mr = pair.b.mr;
    for (let i = 0; i < 16 << 10; i++) mr.bytes[i] = (i * 7) & 0xff;
    const slow = await authenticated(port, key, ep);
    slow.sock.pause(); // its answers back up: the listener stops reading it mid-read
    const n = 2000;
    const length = 16 << 10; // 32 MiB of answers in all, far over the reply budget
    const reads = Buffer.alloc(n * REQ_HEADER);
    for (let i = 0; i < n; i++) {
      const f = request(ep, { opcode: ABI.OP_RDMA_READ, length, token: i + 1 });
      f.writeUInt32LE(i + 1, 4);
      f.writeUInt32LE(pair.a.qp.qpn, 40);
      f.writeDoubleLE(mr.addr, 16);
      f.writeUInt32LE(mr.rkey, 24);
      f.copy(reads, i * REQ_HEADER);
    }
    slow.sock.write(reads);
    await sleep(300);
    // Another connection's reads go through the listener's one buffer meanwhile.
    const fast = await authenticated(port, key, ep);
    for (let i = 0; i < 20; i++) {
      const f = writeFrame(ep, pair, {
        id: i + 1,
        token: n + 1 + i,
        off: 32 << 10,
        length: 30 << 10,
        fill: 0xee,
      });
      fast.sock.write(f);
    }
    await until(() => finalAnswers(fast).length === 20, 'the WRITEs answered');
    expect(
      finalAnswers(fast).every(([, outcome, status]) => outcome === ABI.LINK_DONE && status === 0),
    ).toBe(true);
    // The backed-up connection drains: every READ is answered, in order, with its data.
    const want = Buffer.from(mr.bytes.subarray(0, length));
    const seen = { answers: 0, bad: 0 };
    let pending: Buffer = Buffer.alloc(0);
    slow.sock.removeAllListeners('data');
    const got = slow.received().subarray(HELLO_BYTES + WELCOME_BYTES);
    const take = (chunk: Buffer) => {
      pending = pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk;
      let o = 0;
      while (o + RES_HEADER <= pending.length && o + answerLength(pending, o) <= pending.length) {
        const len = answerLength(pending, o);
        if (pending.readUInt8(o + 8) !== LINK_PROGRESS) {
          const ok =
            pending.readUInt32LE(o + 4) === seen.answers + 1 &&
            pending.readUInt8(o + 8) === ABI.LINK_DONE &&
            pending.readUInt8(o + 9) === 0 &&
            pending.subarray(o + RES_HEADER, o + len).equals(want);
          if (!ok) seen.bad++;
          seen.answers++;
        }
        o += len;
      }
      pending = pending.subarray(o);
    };
    take(got);
    slow.sock.on('data', take);
    slow.sock.resume();
    await until(() => seen.answers === n, 'every READ answered', 20_000);
    expect(seen.bad).toBe(0);
    expect(mr.bytes[(32 << 10) + 100]).toBe(0xee);
  });

  it('read_flood_without_reading_replies_stays_bounded', async () => {
    const { ep, port, key, pair } = await target();
    const r = await authenticated(port, key, ep);
    r.sock.pause(); // never read the answers
    const mr = pair.b.mr;
    const before = await retainedArrayBuffers();
    const read = request(ep, { opcode: ABI.OP_RDMA_READ, length: mr.length });
    read.writeDoubleLE(mr.addr, 16);
    read.writeUInt32LE(mr.rkey, 24);
    // 4000 READs of 64 KiB each: 256 MiB of answers if they were all made.
    for (let i = 0; i < 4000; i++) {
      read.writeUInt32LE(i + 1, 48);
      r.sock.write(read);
    }
    await sleep(500);
    // What is held, not what was made: answers the kernel took are garbage until a GC
    // (loopback buffers take tens of MiB of them: tcp_rmem's maximum is 32 MiB here).
    const grown = (await retainedArrayBuffers()) - before;
    expect(grown).toBeLessThan(16 << 20);
    r.sock.destroy();
  });
});

async function authenticatedWrongKey(port: number): Promise<Raw> {
  const r = await raw(port);
  const deadline = Date.now() + 5000;
  while (r.received().length < HELLO_BYTES) {
    if (Date.now() > deadline) throw new Error('no HELLO');
    await sleep(1);
  }
  const hs = new InitiatorHandshake(Buffer.alloc(32, 7), { slot: 0, gen: 0 });
  const auth = hs.answer(r.received().subarray(0, HELLO_BYTES)) as Buffer;
  expect(auth.length).toBe(AUTH_BYTES);
  r.sock.write(auth);
  return r;
}

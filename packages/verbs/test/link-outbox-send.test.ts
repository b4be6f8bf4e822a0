// The link's Outbox writes what it gathered with one send of its own when nothing of the
// connection is queued in node's stream; what the kernel does not take follows through the
// stream, behind it. Sends cut anywhere (or refused) must leave the byte stream whole and in
// order, and a READ answer far larger than a socket's buffer (split by the kernel itself)
// must arrive whole.
import { writeSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Outbox, type SendNow } from '../src/internal/soft/link/Outbox.js';
import { fakeSocket } from './harness/fakeSocket.js';
import { collect, linkPair, type Pair, providers } from './harness/pair.js';

const MiB = 1 << 20;

/** A connected socket whose peer collects every byte; `end()` resolves with them. */
async function sink(): Promise<{ sock: Socket; end: () => Promise<Buffer>; close: () => void }> {
  const chunks: Buffer[] = [];
  let done: (b: Buffer) => void = () => undefined;
  const server = createServer((s) => {
    s.on('data', (d) => chunks.push(d));
    s.on('end', () => done(Buffer.concat(chunks)));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const { connect } = await import('node:net');
  const sock = connect({ host: '127.0.0.1', port, noDelay: true });
  await new Promise<void>((r) => sock.once('connect', r));
  const ended = new Promise<Buffer>((r) => {
    done = r;
  });
  return {
    sock,
    end: () => {
      sock.end();
      return ended;
    },
    close: () => {
      sock.destroy();
      server.close();
    },
  };
}

/** Bytes `n` long, different per `seed`. */
function pattern(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7) & 0xff;
  return b;
}

describe.runIf(providers.includes('soft'))('soft TCP link: the Outbox sends itself', () => {
  let p: Pair | undefined;
  let close: (() => void) | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
    close?.();
    close = undefined;
  });

  it('sends cut short, refused or failing keep every byte, in order', async () => {
    const s = await sink();
    close = s.close;
    let call = 0;
    let sends = 0;
    // Takes at most 1000 bytes, refuses every third call (EAGAIN), fails every fifth.
    const send: SendNow = (fd, buf, offset, length) => {
      call++;
      if (call % 3 === 0) return -11;
      if (call % 5 === 0) return -32;
      sends++;
      try {
        return writeSync(fd, buf, offset, Math.min(length, 1000));
      } catch {
        return -11; // the kernel's buffer is full: refused as a non-blocking send would be
      }
    };
    const out = new Outbox(s.sock, undefined, send);
    const expected: Buffer[] = [];
    let queued = 0;
    for (let i = 0; i < 120; i++) {
      // Small gathers, now and then one larger than the Outbox's buffer (its own chunk), and
      // some larger than the kernel takes, and frames written to the socket past it: node's
      // stream then holds bytes while the reader drains the kernel, and what is gathered next
      // must queue behind them, not overtake them.
      const n = i % 10 === 9 ? 4 * MiB + i : i % 7 === 6 ? 40_000 + i : 100 + i * 37;
      if (i % 10 === 4) {
        // A frame the connection's LinkClient writes itself, past the Outbox (a large WR).
        const frame = pattern(4 * MiB - i, 1000 + i);
        s.sock.write(frame);
        expected.push(frame);
      }
      const bytes = pattern(n, i);
      const b = out.reserve(n);
      bytes.copy(b, out.at);
      out.commit(n);
      expected.push(bytes);
      if (s.sock.writableLength > 0) queued++;
      out.flush();
      await new Promise((r) => setImmediate(r));
    }
    const got = await s.end();
    expect(sends).toBeGreaterThan(0);
    expect(queued).toBeGreaterThan(0);
    expect(got.equals(Buffer.concat(expected))).toBe(true);
  });

  it('never sends past bytes queued in the stream or corked in it', () => {
    // A socket as the Outbox sees it: bytes of another writer queued (or corked) in its stream.
    const writes: number[] = [];
    const fake = fakeSocket(4096, (b) => writes.push(b.length));
    let sent = 0;
    /** 100 bytes gathered and flushed by an Outbox over `sock` whose own sends count in `sent`. */
    const flush100 = (sock: object, out?: Outbox) => {
      const o =
        out ??
        new Outbox(sock as unknown as Socket, undefined, (_fd, _b, _o, n) => {
          sent += n;
          return n;
        });
      o.reserve(100);
      o.commit(100);
      o.flush();
      return o;
    };
    const out = flush100(fake);
    expect([sent, writes.length]).toEqual([0, 2]); // the bytes, then the empty write's callback
    fake.writableLength = 0;
    fake.writableCorked = 1;
    flush100(fake, out);
    expect(sent).toBe(0);
    // Nothing queued, nothing corked, nothing of its own in flight: its own send.
    flush100({ ...fake, writableCorked: 0 });
    expect(sent).toBe(100);
    // Ended (end() called): node's write reports that, not a send of ours.
    flush100({ ...fake, writableCorked: 0, writable: false });
    expect(sent).toBe(100);
  });

  it('calls the link flush off only with a send of its own that took the last owed bytes', () => {
    // The flag reaches the one send that carries the bytes, and flush says whether it did:
    // when the bytes go through node's stream instead, the caller must call it off itself.
    const fake = fakeSocket();
    const flags: boolean[] = [];
    const out = new Outbox(fake as unknown as Socket, undefined, (_fd, _b, _o, n, settles) => {
      flags.push(settles);
      return n;
    });
    const gatherAndFlush = (settles: boolean): boolean => {
      out.reserve(64);
      out.commit(64);
      return out.flush(settles);
    };
    expect(gatherAndFlush(true)).toBe(true);
    expect(gatherAndFlush(false)).toBe(false);
    expect(flags).toEqual([true, false]);
    // Bytes of another writer queued in the stream: no send of ours, so nothing called off.
    fake.writableLength = 10;
    expect(gatherAndFlush(true)).toBe(false);
    expect(flags).toEqual([true, false]);
    // Nothing gathered: nothing sent, nothing called off.
    expect(out.flush(true)).toBe(false);
  });

  it('a READ answer far larger than the socket buffer arrives whole', async () => {
    p = await linkPair({ mrBytes: 40 * MiB });
    const { a, b } = p;
    const n = 16 * MiB;
    const src = pattern(n, 5);
    b.mr.bytes.set(src, 4 * MiB);
    a.qp.postSend({
      wrId: 1,
      opcode: 'RDMA_READ',
      sgList: [a.mr.sge(20 * MiB, n)],
      remoteAddr: b.mr.addr + 4 * MiB,
      rkey: b.mr.rkey,
    });
    // Small WRs behind it complete after it, in order.
    for (let i = 0; i < 4; i++) {
      a.mr.bytes[i] = 100 + i;
      a.qp.postSend({
        wrId: 2 + i,
        opcode: 'RDMA_WRITE',
        sgList: [a.mr.sge(i, 1)],
        remoteAddr: b.mr.addr + i,
        rkey: b.mr.rkey,
      });
    }
    const wcs = await collect(a.cq, 5, 20_000);
    expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
      [1, 'SUCCESS'],
      [2, 'SUCCESS'],
      [3, 'SUCCESS'],
      [4, 'SUCCESS'],
      [5, 'SUCCESS'],
    ]);
    expect(Buffer.from(a.mr.bytes.subarray(20 * MiB, 20 * MiB + n)).equals(src)).toBe(true);
    expect([...b.mr.bytes.subarray(0, 4)]).toEqual([100, 101, 102, 103]);
  });
});

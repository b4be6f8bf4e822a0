// A large WRITE or SEND over the soft TCP link goes from the registered memory straight into
// the socket (no copy of what the kernel takes); what the kernel does not take at once is
// copied into the QP's frame and follows. Frames far larger than a socket's buffer make that
// split land anywhere — inside an SGE, between two — and the bytes must arrive whole, in
// order, and in the order of the WRs around them.
import { afterEach, describe, expect, it } from 'vitest';
import { collect, linkPair, type Pair, providers } from './harness/pair.js';

const MiB = 1 << 20;

/** Fills `b[from, from + n)` with a pattern that differs per `seed` and per offset. */
function fill(b: Uint8Array, from: number, n: number, seed: number): void {
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[from + i] = x & 0xff;
  }
}

/** The pair's connection from a to b is open: a SEND went through (frames then go direct). */
async function warm(pair: Pair): Promise<void> {
  pair.b.qp.postRecv({ wrId: 999, sgList: [pair.b.mr.sge(0, 64)] });
  pair.a.qp.postSend({ wrId: 999, opcode: 'SEND', sgList: [pair.a.mr.sge(0, 8)] });
  expect((await collect(pair.b.cq, 1))[0]).toMatchObject({ wrId: 999, status: 'SUCCESS' });
  expect((await collect(pair.a.cq, 1))[0]).toMatchObject({ wrId: 999, status: 'SUCCESS' });
}

describe.runIf(providers.includes('soft'))(
  'soft TCP link: large frames from registered memory',
  () => {
    let p: Pair | undefined;
    afterEach(() => {
      p?.close();
      p = undefined;
    });

    it('a WRITE of three SGEs far larger than the socket buffer lands whole; a SEND behind it sees it', async () => {
      p = await linkPair({ mrBytes: 48 * MiB });
      await warm(p);
      const { a, b } = p;
      // Three SGEs of odd sizes from a's memory, 21 MiB in all, into b at 40 000.
      const sizes = [7 * MiB + 3, 9 * MiB - 5, 5 * MiB + 77];
      let at = 0;
      const sgList = sizes.map((n, i) => {
        fill(a.mr.bytes, at, n, 11 + i);
        const sge = a.mr.sge(at, n);
        at += n + 4096; // gaps between them: the SGEs are separate pieces of memory
        return sge;
      });
      const total = sizes.reduce((x, y) => x + y, 0);
      b.qp.postRecv({ wrId: 7, sgList: [b.mr.sge(0, 64)] });
      a.qp.postSend({
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList,
        remoteAddr: b.mr.addr + 40_000,
        rkey: b.mr.rkey,
      });
      a.mr.bytes[at] = 0x5a;
      a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(at, 1)] });
      const recv = (await collect(b.cq, 1, 30_000))[0];
      expect(recv).toMatchObject({ wrId: 7, status: 'SUCCESS', byteLen: 1 });
      // Received after the WRITE: all of it is in place.
      const want = new Uint8Array(total);
      let o = 0;
      for (let i = 0; i < sizes.length; i++) {
        fill(want, o, sizes[i] as number, 11 + i);
        o += sizes[i] as number;
      }
      expect(Buffer.compare(b.mr.bytes.subarray(40_000, 40_000 + total), want)).toBe(0);
      expect(b.mr.bytes[0]).toBe(0x5a);
      const wcs = await collect(a.cq, 2, 30_000);
      expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
        [1, 'SUCCESS'],
        [2, 'SUCCESS'],
      ]);
    });

    it('back-to-back large SENDs keep their bytes and their order', async () => {
      p = await linkPair({ mrBytes: 40 * MiB });
      await warm(p);
      const { a, b } = p;
      const n = 4;
      const size = 4 * MiB + 123;
      for (let i = 0; i < n; i++) {
        fill(a.mr.bytes, i * size, size, 100 + i);
        b.qp.postRecv({ wrId: 10 + i, sgList: [b.mr.sge(i * size, size)] });
      }
      for (let i = 0; i < n; i++)
        a.qp.postSend({ wrId: i, opcode: 'SEND', sgList: [a.mr.sge(i * size, size)] });
      const recvs = await collect(b.cq, n, 30_000);
      expect(recvs.map((w) => [w.wrId, w.status, w.byteLen])).toEqual(
        Array.from({ length: n }, (_, i) => [10 + i, 'SUCCESS', size]),
      );
      expect(
        Buffer.compare(b.mr.bytes.subarray(0, n * size), a.mr.bytes.subarray(0, n * size)),
      ).toBe(0);
      expect((await collect(a.cq, n, 30_000)).every((w) => w.status === 'SUCCESS')).toBe(true);
    });
  },
);

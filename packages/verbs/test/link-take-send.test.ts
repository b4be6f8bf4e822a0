// A small WR over the TCP link is taken, given its request header and sent in one native
// crossing (linkTake with a request id and a socket): the header the addon writes must be
// byte for byte the one frames.ts writes, for every opcode, and a ping-pong must not need a
// separate linkSend for its requests. The addon is watched through a subclass of its
// SoftDevice (the loader's cached module), so what the library calls is what is checked.

import type { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Access, type CompletionQueue } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import { REQ_HEADER, writeRequestHeader } from '../src/internal/soft/link/frames.js';
import { Outbox } from '../src/internal/soft/link/Outbox.js';
import { fakeSocket } from './harness/fakeSocket.js';
import { ALL, collect, linkPair, type Pair, providers } from './harness/pair.js';
import { watchAddon } from './harness/watchAddon.js';

interface Watch {
  calls: Map<string, number>;
  /** headers the addon wrote that differ from frames.ts's for the same record */
  mismatches: string[];
  /** opcodes of the WRs whose header the addon wrote */
  headed: number[];
  /** hdr[LINK_HEAD] of each of those WRs (1: the oldest unfinished, 0: taken behind it) */
  heads: number[];
  /** opcodes of those whose header carries LINK_FLAG_SOLICITED */
  solicited: number[];
  restore(): void;
}

/** Devices opened until restore() count their addon calls and check linkTake's headers. */
function watchTakes(): Watch {
  const mismatches: string[] = [];
  const headed: number[] = [];
  const heads: number[] = [];
  const solicited: number[] = [];
  const expected = Buffer.alloc(REQ_HEADER);
  // reqId: the LINK_IN_REQ_ID word as the call found it (the call zeroes it).
  const checkTake = (a: unknown[], reqId: number, r: unknown): void => {
    const [, hdr, frame, offset] = a as [number, Float64Array, Uint8Array, number];
    if (!reqId || (r !== ABI.LINK_TAKE_READY && r !== ABI.LINK_TAKE_LAST)) return;
    const opcode = hdr[ABI.LINK_OPCODE] as number;
    const length = hdr[ABI.LINK_LENGTH] as number;
    writeRequestHeader(expected, 0, reqId, hdr, opcode === ABI.OP_RDMA_READ ? 0 : length);
    const got = Buffer.from(frame.buffer, frame.byteOffset + offset - REQ_HEADER, REQ_HEADER);
    headed.push(opcode);
    heads.push(hdr[ABI.LINK_HEAD] as number);
    if (((got[9] as number) & ABI.LINK_FLAG_SOLICITED) !== 0) solicited.push(opcode);
    if (!got.equals(expected))
      mismatches.push(`${got.toString('hex')} != ${expected.toString('hex')}`);
  };
  const watch = watchAddon({
    before: (name, a) =>
      name === 'linkTake' ? ((a[1] as Float64Array)[ABI.LINK_IN_REQ_ID] ?? 0) : 0,
    after: (name, a, r, reqId) => {
      if (name === 'linkTake') checkTake(a, reqId as number, r);
    },
  });
  return { calls: watch.calls, mismatches, headed, heads, solicited, restore: watch.restore };
}

/** The next receive completion on `cq` (send completions before it are skipped). */
async function received(cq: CompletionQueue): Promise<void> {
  for (;;) {
    const [wc] = await collect(cq, 1);
    expect(wc?.status).toBe('SUCCESS');
    if (wc?.opcode === 'RECV') return;
  }
}

describe.runIf(providers.includes('soft'))(
  'soft TCP link: take, header and send in one call',
  () => {
    let p: Pair | undefined;
    let w: Watch | undefined;
    afterEach(() => {
      p?.close();
      p = undefined;
      w?.restore();
      w = undefined;
    });

    it('writes the header frames.ts writes, for every opcode', async () => {
      w = watchTakes();
      p = await linkPair({ mrAccess: ALL | Access.RemoteAtomic });
      w.restore();
      const { a, b } = p;
      a.mr.bytes.set([1, 2, 3, 4, 5, 6, 7, 8], 0);
      // The first WR waits for the connection to authenticate and goes as a frame of its own.
      b.qp.postRecv({ wrId: 0, sgList: [b.mr.sge(0, 8)] });
      a.qp.postSend({ wrId: 0, opcode: 'SEND', sgList: [a.mr.sge(0, 1)] });
      await collect(a.cq, 1);
      await collect(b.cq, 1);
      b.qp.postRecv([1, 2, 3].map((i) => ({ wrId: i, sgList: [b.mr.sge(i * 8, 8)] })));
      const view = new DataView(b.mr.bytes.buffer, b.mr.bytes.byteOffset);
      view.setBigUint64(4096, 5n, true);
      view.setBigUint64(4104, 7n, true);
      const remote = (at: number) => ({ remoteAddr: b.mr.addr + at, rkey: b.mr.rkey });
      const asked = (at: number) => ({ ...remote(at), solicited: true });
      // One at a time: each is taken alone (the last WR there is), so each may go out with the take.
      // `solicited` travels only with the operations that complete a receive (a WRITE's or a
      // READ's is dropped: the target refuses the flag on them).
      const wrs = [
        { wrId: 1, opcode: 'SEND' as const, sgList: [a.mr.sge(0, 3)] },
        {
          wrId: 2,
          opcode: 'SEND_WITH_IMM' as const,
          imm: 0xfedcba98,
          sgList: [a.mr.sge(0, 8)],
          solicited: true,
        },
        { wrId: 3, opcode: 'RDMA_WRITE' as const, sgList: [a.mr.sge(0, 4)], ...asked(2048) },
        {
          wrId: 4,
          opcode: 'RDMA_WRITE_WITH_IMM' as const,
          imm: 3,
          sgList: [a.mr.sge(4, 4)],
          ...asked(2052),
        },
        { wrId: 5, opcode: 'RDMA_READ' as const, sgList: [a.mr.sge(100, 8)], ...asked(2048) },
        {
          wrId: 6,
          opcode: 'ATOMIC_FETCH_AND_ADD' as const,
          compareAdd: 10n,
          sgList: [a.mr.sge(200, 8)],
          ...remote(4096),
        },
        {
          wrId: 7,
          opcode: 'ATOMIC_CMP_AND_SWP' as const,
          compareAdd: 7n,
          swap: 99n,
          sgList: [a.mr.sge(208, 8)],
          ...remote(4104),
        },
      ];
      for (const wr of wrs) {
        a.qp.postSend(wr);
        const [wc] = await collect(a.cq, 1);
        expect([wc?.wrId, wc?.status]).toEqual([wr.wrId, 'SUCCESS']);
      }
      const r = await collect(b.cq, 3);
      expect(r.map((c) => [c.wrId, c.opcode, c.byteLen, c.imm])).toEqual([
        [1, 'RECV', 3, 0],
        [2, 'RECV', 8, 0xfedcba98],
        [3, 'RECV_RDMA_WITH_IMM', 4, 3],
      ]);
      expect([...b.mr.bytes.subarray(2048, 2056)]).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
      expect([...a.mr.bytes.subarray(100, 108)]).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
      const av = new DataView(a.mr.bytes.buffer, a.mr.bytes.byteOffset);
      expect([av.getBigUint64(200, true), av.getBigUint64(208, true)]).toEqual([5n, 7n]);
      expect([view.getBigUint64(4096, true), view.getBigUint64(4104, true)]).toEqual([15n, 99n]);
      expect(w.mismatches).toEqual([]);
      expect(w.solicited).toEqual([ABI.OP_SEND_WITH_IMM, ABI.OP_RDMA_WRITE_WITH_IMM]);
      expect(new Set(w.headed)).toEqual(
        new Set([
          ABI.OP_SEND,
          ABI.OP_SEND_WITH_IMM,
          ABI.OP_RDMA_WRITE,
          ABI.OP_RDMA_WRITE_WITH_IMM,
          ABI.OP_RDMA_READ,
          ABI.OP_ATOMIC_FETCH_AND_ADD,
          ABI.OP_ATOMIC_CMP_AND_SWP,
        ]),
      );
    });

    it('writes the header of a WR taken behind others (pipelined, not the head)', async () => {
      w = watchTakes();
      p = await linkPair({ maxSendWr: 64, maxRecvWr: 64 });
      w.restore();
      const { a, b } = p;
      b.qp.postRecv(
        Array.from({ length: 9 }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(i * 8, 8)] })),
      );
      a.qp.postSend({ wrId: 0, opcode: 'SEND', sgList: [a.mr.sge(0, 1)] });
      await collect(a.cq, 1);
      w.headed.length = 0;
      w.heads.length = 0;
      // Eight posted at once: taken one after another, all but the first behind the head.
      a.qp.postSend(
        Array.from({ length: 8 }, (_, i) => ({
          wrId: i + 1,
          opcode: 'SEND_WITH_IMM' as const,
          imm: i,
          sgList: [a.mr.sge(i, 8)],
        })),
      );
      await collect(a.cq, 8);
      const r = await collect(b.cq, 9);
      expect(r.slice(1).map((c) => c.imm)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      expect(w.mismatches).toEqual([]);
      expect(w.headed.length).toBe(8);
      expect(w.heads).toContain(0);
    });

    it('a ping-pong sends its requests with the take, not with linkSend', async () => {
      w = watchTakes();
      p = await linkPair({ maxSendWr: 64, maxRecvWr: 64 });
      w.restore();
      const { a, b } = p;
      const rounds = 200;
      b.qp.postRecv(Array.from({ length: 32 }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(0, 64)] })));
      a.qp.postRecv(Array.from({ length: 32 }, (_, i) => ({ wrId: i, sgList: [a.mr.sge(0, 64)] })));
      for (let i = -1; i < rounds; i++) {
        if (i === 0) {
          // The first round opened the connection (its first WR waited for it): counted after.
          w.calls.clear();
          w.headed.length = 0;
        }
        a.qp.postSend({ wrId: i + 1, opcode: 'SEND', sgList: [a.mr.sge(64, 64)] });
        await received(b.cq);
        b.qp.postRecv({ wrId: i + 1, sgList: [b.mr.sge(0, 64)] });
        b.qp.postSend({ wrId: i + 1, opcode: 'SEND', sgList: [b.mr.sge(64, 64)] });
        await received(a.cq);
        a.qp.postRecv({ wrId: i + 1, sgList: [a.mr.sge(0, 64)] });
      }
      expect(w.mismatches).toEqual([]);
      expect(w.headed.length).toBeGreaterThanOrEqual(2 * rounds);
      // Every request and the answers before it left with its take: linkSend is for answers
      // with no request to ride on, and a ping-pong's always have one.
      expect(w.calls.get('linkSend') ?? 0).toBeLessThan(rounds / 10);
    });

    it('what the kernel did not take of a native send follows through the stream, in order', () => {
      // A socket as the Outbox sees it: nothing queued, so a native send may go first.
      const writes: Buffer[] = [];
      const fake = fakeSocket(0, (b) => writes.push(Buffer.from(b)));
      const out = new Outbox(fake as unknown as Socket, undefined, () => -11);
      expect(out.sendFd()).toBe(99);
      const b = out.reserve(100);
      for (let i = 0; i < 100; i++) b[out.at + i] = i;
      out.commit(100);
      // The take sent it and the kernel took 40 bytes: the other 60 go through the stream.
      expect(out.sentNatively(100, 40, true)).toBe(true);
      expect(out.used).toBe(0);
      expect(writes.map((w) => [w.length, w[0]])).toEqual([[60, 40]]);
      // All of it taken: nothing more through the stream.
      out.reserve(10);
      out.commit(10);
      expect(out.sentNatively(10, 10, false)).toBe(false);
      expect(writes.length).toBe(1);
      // Bytes of another writer queued in the stream: no native send may go before them.
      fake.writableLength = 5;
      expect(out.sendFd()).toBe(-1);
    });
  },
);

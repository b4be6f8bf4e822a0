// The target of the soft TCP link runs the common request (a SEND or WRITE of the pair it
// served last, at the token that pair expects) in one native crossing, respondFrame: the
// header is parsed and checked natively, run, and answered into the out buffer. Anything
// else is not run there (FRAME_NOT_RUN) and takes the JS path with all its checks. The peer's
// bytes are untrusted: malformed, short or oversized headers, and any frame naming another
// QP, source or token, run nothing and write nothing.
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { Access } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import { REQ_HEADER, RES_HEADER, writeResponseHeader } from '../src/internal/soft/link/frames.js';
import { ALL, collect, linkPair, type Pair, providers } from './harness/pair.js';
import { type AddonWatch, watchAddon } from './harness/watchAddon.js';

type RespondFrame = (rec: Float64Array, frame: Uint8Array, out: Uint8Array) => number;

/** A respondFrame call as it was made: its target, its record's inputs, its frame's bytes. */
interface Call {
  target: { respondFrame: RespondFrame };
  inputs: number[];
  frame: Buffer;
  result: number;
}

const IN_WORDS = ABI.FRAME_IN_TOKEN + 1;

function watchFrames(): { watch: AddonWatch; frames: Call[] } {
  const frames: Call[] = [];
  const watch = watchAddon({
    before: (name, a) => {
      if (name !== 'respondFrame') return undefined;
      const rec = a[0] as Float64Array;
      const b = a[1] as Uint8Array;
      const off = rec[ABI.FRAME_IN_OFFSET] as number;
      const len = rec[ABI.FRAME_IN_LENGTH] as number;
      return {
        inputs: [...rec.subarray(0, IN_WORDS)],
        frame: Buffer.from(b.subarray(off, off + len)),
      };
    },
    after: (name, _a, result, seen, target) => {
      if (name !== 'respondFrame') return;
      const s = seen as { inputs: number[]; frame: Buffer };
      frames.push({ target: target as Call['target'], ...s, result: result as number });
    },
  });
  return { watch, frames };
}

/** respondFrame on `call`'s target with `frame` and `call`'s inputs (tweaked by `set`). */
function replay(
  call: Call,
  frame: Buffer,
  set: Partial<Record<number, number>> = {},
  out = Buffer.alloc(2 * RES_HEADER, 0xee),
): number {
  const rec = new Float64Array(ABI.FRAME_WORDS);
  rec.set(call.inputs);
  rec[ABI.FRAME_IN_OFFSET] = 0;
  rec[ABI.FRAME_IN_LENGTH] = frame.length;
  rec[ABI.FRAME_IN_OUT_AT] = 0;
  for (const [k, v] of Object.entries(set)) rec[Number(k)] = v as number;
  return call.target.respondFrame(rec, frame, out);
}

function edited(f: Buffer, edit: (b: Buffer) => void): Buffer {
  const b = Buffer.from(f);
  edit(b);
  return b;
}

describe.runIf(providers.includes('soft'))(
  'soft TCP link: the common request in one crossing',
  () => {
    let p: Pair | undefined;
    let w: AddonWatch | undefined;
    afterEach(() => {
      p?.close();
      p = undefined;
      w?.restore();
      w = undefined;
    });

    it('sends and writes after the first run natively; READs and atomics take the JS path', async () => {
      const watched = watchFrames();
      w = watched.watch;
      p = await linkPair({ mrAccess: ALL | Access.RemoteAtomic });
      w.restore();
      const { a, b } = p;
      const remote = { remoteAddr: b.mr.addr + 1024, rkey: b.mr.rkey };
      b.qp.postRecv(Array.from({ length: 16 }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(0, 64)] })));
      const n = 12;
      for (let i = 0; i < n; i++) {
        a.qp.postSend({ wrId: i, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
        expect((await collect(a.cq, 1))[0]?.status).toBe('SUCCESS');
      }
      a.qp.postSend({ wrId: 100, opcode: 'RDMA_WRITE', sgList: [a.mr.sge(0, 8)], ...remote });
      a.qp.postSend({ wrId: 101, opcode: 'RDMA_READ', sgList: [a.mr.sge(64, 8)], ...remote });
      a.qp.postSend({
        wrId: 102,
        opcode: 'ATOMIC_FETCH_AND_ADD',
        compareAdd: 1n,
        sgList: [a.mr.sge(128, 8)],
        remoteAddr: b.mr.addr + 2048,
        rkey: b.mr.rkey,
      });
      const wcs = await collect(a.cq, 3);
      expect(wcs.map((c) => c.status)).toEqual(['SUCCESS', 'SUCCESS', 'SUCCESS']);
      expect((await collect(b.cq, n)).every((c) => c.opcode === 'RECV')).toBe(true);
      const { frames } = watched;
      const ran = frames.filter((c) => c.result === ABI.LINK_DONE);
      // The first frame found no pair yet (JS path); every SEND after it and the WRITE ran here.
      expect(ran.length).toBeGreaterThanOrEqual(n);
      expect(ran.every((c) => c.frame[8] === ABI.OP_SEND || c.frame[8] === ABI.OP_RDMA_WRITE)).toBe(
        true,
      );
      const notRun = frames.filter((c) => c.result === ABI.FRAME_NOT_RUN).map((c) => c.frame[8]);
      expect(notRun).toEqual([ABI.OP_RDMA_READ, ABI.OP_ATOMIC_FETCH_AND_ADD]);
      expect(w.calls.get('respond') ?? 0).toBeLessThanOrEqual(3);
    });

    it('malformed, short or oversized headers and frames for another QP, source or token run nothing', async () => {
      const watched = watchFrames();
      w = watched.watch;
      p = await linkPair();
      w.restore();
      const { a, b } = p;
      b.qp.postRecv(Array.from({ length: 8 }, (_, i) => ({ wrId: i, sgList: [b.mr.sge(0, 64)] })));
      for (let i = 0; i < 3; i++) {
        a.qp.postSend({ wrId: i, opcode: 'SEND', imm: 0, sgList: [a.mr.sge(0, 8)] });
        await collect(a.cq, 1);
      }
      await collect(b.cq, 3);
      const call = watched.frames.find((c) => c.result === ABI.LINK_DONE) as Call;
      expect(call).toBeDefined();
      const f = call.frame;
      expect(f.length).toBe(REQ_HEADER + 8);
      const token = f.readUInt32LE(48);
      const cases: [string, Buffer, Partial<Record<number, number>>?][] = [
        ['shorter than a header', f.subarray(0, REQ_HEADER - 1)],
        ['header only, payload missing', f.subarray(0, REQ_HEADER)],
        ['a byte more than it declares', Buffer.concat([f, Buffer.alloc(1)])],
        ['length word past the buffer', edited(f, (x) => x.writeUInt32LE(f.length + 1, 0))],
        ['payload length not the frame', edited(f, (x) => x.writeUInt32LE(9, 28))],
        ['oversized payload length', edited(f, (x) => x.writeUInt32LE(0xffffffff, 28))],
        [
          'oversized both',
          edited(f, (x) => {
            x.writeUInt32LE(0xffffffff, 0);
            x.writeUInt32LE(0xffffffff - 52, 28);
          }),
        ],
        ['undefined flag bit', edited(f, (x) => x.writeUInt8((x[9] as number) | 8, 9))],
        [
          'solicited on a WRITE (completes no receive)',
          edited(f, (x) => {
            x.writeUInt8(ABI.OP_RDMA_WRITE, 8);
            x.writeUInt8((x[9] as number) | ABI.LINK_FLAG_SOLICITED, 9);
          }),
        ],
        ['opcode past OP_LAST', edited(f, (x) => x.writeUInt8(ABI.OP_LAST + 1, 8))],
        ['opcode 255', edited(f, (x) => x.writeUInt8(255, 8))],
        [
          'a READ',
          edited(f, (x) => {
            x.writeUInt8(ABI.OP_RDMA_READ, 8);
            x.writeUInt32LE(REQ_HEADER, 0);
          }).subarray(0, REQ_HEADER),
        ],
        [
          'an atomic',
          edited(Buffer.concat([f, Buffer.alloc(8)]), (x) => {
            x[8] = ABI.OP_ATOMIC_FETCH_AND_ADD;
            x.writeUInt32LE(REQ_HEADER + 16, 0);
            x.writeUInt32LE(16, 28);
          }),
        ],
        ['remote address NaN', edited(f, (x) => x.writeDoubleLE(Number.NaN, 16))],
        ['remote address negative', edited(f, (x) => x.writeDoubleLE(-8, 16))],
        ['remote address fractional', edited(f, (x) => x.writeDoubleLE(1.5, 16))],
        ['remote address past 2^53', edited(f, (x) => x.writeDoubleLE(2 ** 53, 16))],
        ['another token', edited(f, (x) => x.writeUInt32LE(token + 1, 48))],
        ['another slot', edited(f, (x) => x.writeUInt32LE(f.readUInt32LE(32) + 1, 32))],
        ['another generation', edited(f, (x) => x.writeUInt32LE(f.readUInt32LE(36) + 1, 36))],
        ['another source QP', edited(f, (x) => x.writeUInt32LE(f.readUInt32LE(40) ^ 1, 40))],
        ['another source process', edited(f, (x) => x.writeUInt32LE(f.readUInt32LE(44) ^ 1, 44))],
        ['no token expected', f, { [ABI.FRAME_IN_TOKEN]: 0 }],
        ['expecting another token', f, { [ABI.FRAME_IN_TOKEN]: token + 1 }],
      ];
      for (const [what, frame, set] of cases) {
        const out = Buffer.alloc(2 * RES_HEADER, 0xee);
        expect([what, replay(call, frame, set, out)]).toEqual([what, ABI.FRAME_NOT_RUN]);
        expect([what, out.every((x) => x === 0xee)]).toEqual([what, true]);
      }
      // No room for the answer: not run either.
      expect(replay(call, f, { [ABI.FRAME_IN_OUT_AT]: 2 * RES_HEADER - 1 })).toBe(
        ABI.FRAME_NOT_RUN,
      );
      // Seeded random headers with the pair's fields in place never run, never throw.
      fc.assert(
        fc.property(fc.uint8Array({ minLength: 0, maxLength: 120 }), (bytes) => {
          const x = Buffer.from(bytes);
          if (x.length >= REQ_HEADER) x.writeUInt32LE(token + 1, 48);
          return replay(call, x) === ABI.FRAME_NOT_RUN;
        }),
        { seed: 10, numRuns: 300 },
      );
      expect(b.cq.pending()).toBe(0);
      // Positions past the buffers are the caller's mistake: a typed error.
      expect(() => replay(call, f, { [ABI.FRAME_IN_OFFSET]: f.length + 1 })).toThrow(
        expect.objectContaining({ code: 'ERR_RDMA_INVALID_ARG' }),
      );
      expect(() => replay(call, f, { [ABI.FRAME_IN_LENGTH]: f.length + 1 })).toThrow(
        expect.objectContaining({ code: 'ERR_RDMA_INVALID_ARG' }),
      );
      expect(() => replay(call, f, { [ABI.FRAME_IN_OUT_AT]: Number.NaN })).toThrow(
        expect.objectContaining({ code: 'ERR_RDMA_INVALID_ARG' }),
      );
      // The frame itself runs (a receive is posted) and its answer is frames.ts's, byte for byte.
      const out = Buffer.alloc(2 * RES_HEADER, 0xee);
      expect(replay(call, f, {}, out)).toBe(ABI.LINK_DONE);
      // (an answer carries the target QP's min RNR timer, as respond() answers)
      const rnr = out.readUInt16LE(10);
      expect(rnr).toBeLessThanOrEqual(31);
      const expected = Buffer.alloc(RES_HEADER);
      writeResponseHeader(expected, 0, f.readUInt32LE(4), ABI.LINK_DONE, 0, rnr, 0);
      expect(out.subarray(0, RES_HEADER).toString('hex')).toBe(expected.toString('hex'));
      expect(out.subarray(RES_HEADER).every((x) => x === 0xee)).toBe(true);
      const [wc] = await collect(b.cq, 1);
      expect([wc?.opcode, wc?.status, wc?.byteLen]).toEqual(['RECV', 'SUCCESS', 8]);
    });
  },
);

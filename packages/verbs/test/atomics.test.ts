// ATOMIC_FETCH_AND_ADD and ATOMIC_CMP_AND_SWP, on every provider: the prior value comes
// back in the local SGE, the target changes once per operation, and the responder's checks
// (QP access, alignment, key, range, MR access) fail as rxe fails them.
import { afterEach, describe, expect, it } from 'vitest';
import { Access, type SendWr } from '../src/index.js';
import { collect, linkPair, type Pair, pair, providers, until } from './harness/pair.js';

type MakePair = (...args: Parameters<typeof linkPair>) => Pair | Promise<Pair>;
// Every provider over shared memory (or the NIC), and soft over its TCP link.
const paths: [string, MakePair][] = [
  ...providers.map((pv): [string, MakePair] => [pv, (o, c) => pair(pv, o, c)]),
  ['soft over the TCP link', linkPair],
];
// The responder's error statuses are measured on soft only so far; on rxe they are still to
// be probed (RC-SEMANTICS has no atomics section yet), so those cases run on soft.
const errorCases = (name: string) => name !== 'ibverbs';

const RESULT = 0; // offset of the 8-byte result slot in the initiator's MR
const TARGET = 64; // offset of the 8-byte target word in the responder's MR
const mrAccess = Access.LocalWrite | Access.RemoteAtomic;

describe.each(paths)('atomics on %s', (_name, make) => {
  let p: Pair;
  afterEach(() => p?.close());

  const word = (bytes: Uint8Array, off: number) =>
    new BigUint64Array(bytes.buffer, bytes.byteOffset + off, 1);

  function atomic(
    extra: Partial<SendWr> & Pick<SendWr, 'opcode'>,
    target = TARGET,
    rkey?: number,
  ): SendWr {
    const { a, b } = p;
    return {
      wrId: 1,
      sgList: [a.mr.sge(RESULT, 8)],
      remoteAddr: b.mr.addr + target,
      rkey: rkey ?? b.mr.rkey,
      ...extra,
    };
  }

  it('FETCH_AND_ADD returns the prior value and adds modulo 2^64', async () => {
    p = await make({ mrAccess });
    const { a, b } = p;
    word(b.mr.bytes, TARGET)[0] = (1n << 64n) - 2n;
    a.qp.postSend(atomic({ opcode: 'ATOMIC_FETCH_AND_ADD', compareAdd: 5n }));
    const [wc] = await collect(a.cq, 1);
    expect(wc).toMatchObject({ status: 'SUCCESS', opcode: 'FETCH_ADD', byteLen: 8 });
    expect(word(a.mr.bytes, RESULT)[0]).toBe((1n << 64n) - 2n);
    expect(word(b.mr.bytes, TARGET)[0]).toBe(3n);
  });

  it('CMP_AND_SWP swaps only when the target equals compareAdd, and returns the prior value', async () => {
    p = await make({ mrAccess });
    const { a, b } = p;
    word(b.mr.bytes, TARGET)[0] = 7n;
    a.qp.postSend([
      atomic({ wrId: 1, opcode: 'ATOMIC_CMP_AND_SWP', compareAdd: 6n, swap: 100n }),
      {
        ...atomic({ opcode: 'ATOMIC_CMP_AND_SWP', compareAdd: 7n, swap: 0xffff_ffff_ffffn }),
        wrId: 2,
        sgList: [a.mr.sge(RESULT + 8, 8)],
      },
    ]);
    const wcs = await collect(a.cq, 2);
    expect(wcs.map((w) => [w.wrId, w.status, w.opcode])).toEqual([
      [1, 'SUCCESS', 'COMP_SWAP'],
      [2, 'SUCCESS', 'COMP_SWAP'],
    ]);
    expect(word(a.mr.bytes, RESULT)[0]).toBe(7n); // failed compare: the value found
    expect(word(a.mr.bytes, RESULT + 8)[0]).toBe(7n); // swapped: the value before
    expect(word(b.mr.bytes, TARGET)[0]).toBe(0xffff_ffff_ffffn);
  });

  it('many fetch-adds from two QPs are each applied once', async () => {
    p = await make({ mrAccess, maxSendWr: 64 });
    const { a, b } = p;
    const other = a.pd.createQp({ sendCq: a.cq, recvCq: a.cq, maxSendWr: 64, maxRecvWr: 1 });
    const peer = b.pd.createQp({ sendCq: b.cq, recvCq: b.cq, maxSendWr: 1, maxRecvWr: 1 });
    other.connect(peer.endpoint());
    peer.connect(other.endpoint());
    word(b.mr.bytes, TARGET)[0] = 0n;
    const batch = (qp: typeof other, base: number) =>
      qp.postSend(
        Array.from({ length: 32 }, (_, i) => ({
          ...atomic({ opcode: 'ATOMIC_FETCH_AND_ADD', compareAdd: 1n }),
          wrId: base + i,
          sgList: [a.mr.sge(1024 + (base + i) * 8, 8)],
        })),
      );
    batch(a.qp, 0);
    batch(other, 32);
    const wcs = await collect(a.cq, 64);
    expect(wcs.every((w) => w.status === 'SUCCESS')).toBe(true);
    expect(word(b.mr.bytes, TARGET)[0]).toBe(64n);
    // Every prior value 0..63 was seen exactly once.
    const priors = Array.from(
      new BigUint64Array(a.mr.bytes.buffer, a.mr.bytes.byteOffset + 1024, 64),
      Number,
    ).sort((x, y) => x - y);
    expect(priors).toEqual(Array.from({ length: 64 }, (_, i) => i));
  });

  it.runIf(errorCases(_name))(
    'a misaligned target is an invalid request; the target QP fails too',
    async () => {
      p = await make({ mrAccess });
      const { a, b } = p;
      a.qp.postSend(atomic({ opcode: 'ATOMIC_FETCH_AND_ADD', compareAdd: 1n }, TARGET + 4));
      expect((await collect(a.cq, 1))[0]?.status).toBe('REM_INV_REQ_ERR');
      await until(() => b.qp.state === 'error', 'the target QP in error');
    },
  );

  it.runIf(errorCases(_name))(
    'a bad rkey, an out-of-range address or an MR without RemoteAtomic is a remote access error',
    async () => {
      for (const bad of ['rkey', 'range', 'access'] as const) {
        p?.close();
        p = await make({
          mrAccess:
            bad === 'access'
              ? Access.LocalWrite | Access.RemoteRead | Access.RemoteWrite
              : Access.LocalWrite | Access.RemoteAtomic,
        });
        const { a, b } = p;
        const wr =
          bad === 'rkey'
            ? atomic(
                { opcode: 'ATOMIC_FETCH_AND_ADD', compareAdd: 1n },
                TARGET,
                (b.mr.rkey ^ 0x5a5a00) >>> 0,
              )
            : bad === 'range'
              ? atomic({ opcode: 'ATOMIC_FETCH_AND_ADD', compareAdd: 1n }, b.mr.length)
              : atomic({ opcode: 'ATOMIC_FETCH_AND_ADD', compareAdd: 1n });
        a.qp.postSend(wr);
        expect((await collect(a.cq, 1))[0]?.status, bad).toBe('REM_ACCESS_ERR');
        await until(() => b.qp.state === 'error', `the target QP in error (${bad})`);
      }
    },
  );

  it.runIf(errorCases(_name))(
    'a QP that does not grant RemoteAtomic refuses atomics as an invalid request',
    async () => {
      p = await make({}, { b: { access: Access.RemoteRead | Access.RemoteWrite } });
      const { a, b } = p;
      a.qp.postSend(atomic({ opcode: 'ATOMIC_CMP_AND_SWP', compareAdd: 0n, swap: 1n }));
      expect((await collect(a.cq, 1))[0]?.status).toBe('REM_INV_REQ_ERR');
      expect(word(b.mr.bytes, TARGET)[0]).toBe(0n);
    },
  );

  it('malformed atomic work requests are refused at post with typed errors', async () => {
    p = await make({ mrAccess });
    const { a } = p;
    const fa = { opcode: 'ATOMIC_FETCH_AND_ADD' as const, compareAdd: 1n };
    const cases: [SendWr, string][] = [
      [{ ...atomic(fa), sgList: [a.mr.sge(0, 4)] }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...atomic(fa), sgList: [a.mr.sge(0, 4), a.mr.sge(8, 4)] }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...atomic(fa), compareAdd: 1 as unknown as bigint }, 'ERR_RDMA_INVALID_ARG'],
      [{ ...atomic(fa), compareAdd: -1n }, 'ERR_RDMA_OUT_OF_RANGE'],
      [{ ...atomic(fa), compareAdd: 1n << 64n }, 'ERR_RDMA_OUT_OF_RANGE'],
      [{ ...atomic(fa), swap: 1n }, 'ERR_RDMA_INVALID_ARG'],
      [atomic({ opcode: 'ATOMIC_CMP_AND_SWP', compareAdd: 1n }), 'ERR_RDMA_INVALID_ARG'],
      [{ ...atomic(fa), inline: true }, 'ERR_RDMA_INVALID_ARG'],
    ];
    for (const [wr, code] of cases) {
      expect(
        () => a.qp.postSend(wr),
        JSON.stringify(wr, (_, v) => (typeof v === 'bigint' ? `${v}n` : v)),
      ).toThrow(expect.objectContaining({ code }));
    }
  });
});

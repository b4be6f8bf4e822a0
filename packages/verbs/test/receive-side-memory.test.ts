// Receive-side memory errors, matched to rxe: the responder checks only the bytes a message
// writes (key, range, LOCAL_WRITE), and every receive-side memory error completes the
// receive with LOC_QP_OP_ERR (the sender REM_OP_ERR, both QPs to error). Run on every
// provider under test, and on soft's TCP link, where the target's engine decides.
import { afterEach, describe, expect, it } from 'vitest';
import { Access } from '../src/index.js';
import { collect, linkPair, type Pair, pair, providers, type SideOptions } from './harness/pair.js';

interface Path {
  name: string;
  make(o?: SideOptions): Promise<Pair>;
}

const paths: Path[] = [
  ...providers.map((provider) => ({
    name: provider === 'soft' ? 'soft (shared memory)' : provider,
    make: async (o?: SideOptions) => pair(provider, o),
  })),
  ...(providers.includes('soft') ? [{ name: 'soft (TCP link)', make: linkPair }] : []),
];

describe.each(paths)('receive-side memory errors on $name', ({ make }) => {
  let p: Pair | undefined;
  afterEach(() => {
    p?.close();
    p = undefined;
  });

  async function expectReceiveFailure(wrId: number) {
    const { a, b } = p as Pair;
    const [s] = await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(s).toMatchObject({ wrId: 1, status: 'REM_OP_ERR' });
    expect(r).toMatchObject({ wrId, status: 'LOC_QP_OP_ERR' });
    expect(a.qp.state).toBe('error');
    expect(b.qp.state).toBe('error');
  }

  it('a receive SGE running past its region takes a message that fits: SUCCESS', async () => {
    p = await make();
    const { a, b } = p;
    const tail = b.mr.addr + b.mr.length - 16;
    b.qp.postRecv({ wrId: 7, sgList: [{ addr: tail, length: 64, lkey: b.mr.lkey }] });
    a.mr.bytes.set([1, 2, 3, 4, 5, 6, 7, 8], 0);
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    const [s] = await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(s).toMatchObject({ wrId: 1, status: 'SUCCESS' });
    expect(r).toMatchObject({ wrId: 7, status: 'SUCCESS', byteLen: 8 });
    expect([...b.mr.bytes.subarray(b.mr.length - 16, b.mr.length - 8)]).toEqual([
      1, 2, 3, 4, 5, 6, 7, 8,
    ]);
    expect(a.qp.state).toBe('rts');
    expect(b.qp.state).toBe('rts');
  });

  it('a message reaching past the region of its receive SGE: LOC_QP_OP_ERR / REM_OP_ERR', async () => {
    p = await make();
    const { a, b } = p;
    const tail = b.mr.addr + b.mr.length - 16;
    b.qp.postRecv({ wrId: 7, sgList: [{ addr: tail, length: 64, lkey: b.mr.lkey }] });
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 32)] });
    await expectReceiveFailure(7);
  });

  it('a receive into a region without LOCAL_WRITE: LOC_QP_OP_ERR / REM_OP_ERR', async () => {
    p = await make();
    const { a, b } = p;
    const readOnly = b.pd.allocMr(4096, Access.RemoteRead);
    b.qp.postRecv({ wrId: 7, sgList: [readOnly.sge(0, 64)] });
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await expectReceiveFailure(7);
    expect(readOnly.bytes.subarray(0, 64).every((v) => v === 0)).toBe(true);
  });

  it('a receive with a bad lkey: LOC_QP_OP_ERR / REM_OP_ERR', async () => {
    p = await make();
    const { a, b } = p;
    b.qp.postRecv({ wrId: 7, sgList: [{ ...b.mr.sge(0, 64), lkey: (b.mr.lkey ^ 0x5a5a) >>> 0 }] });
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await expectReceiveFailure(7);
  });

  it('a zero-length SEND into a receive with a bad lkey writes nothing: SUCCESS', async () => {
    p = await make();
    const { a, b } = p;
    b.qp.postRecv({ wrId: 7, sgList: [{ ...b.mr.sge(0, 64), lkey: (b.mr.lkey ^ 0x5a5a) >>> 0 }] });
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [] });
    const [s] = await collect(a.cq, 1);
    const [r] = await collect(b.cq, 1);
    expect(s).toMatchObject({ wrId: 1, status: 'SUCCESS' });
    expect(r).toMatchObject({ wrId: 7, status: 'SUCCESS', byteLen: 0 });
    expect(b.qp.state).toBe('rts');
  });

  it('SGEs a short message leaves untouched are not checked', async () => {
    p = await make();
    const { a, b } = p;
    const bogus = { addr: 8, length: 64, lkey: (b.mr.lkey ^ 0x5a5a) >>> 0 };
    b.qp.postRecv({ wrId: 7, sgList: [b.mr.sge(0, 16), bogus] });
    a.mr.bytes.fill(9, 0, 16);
    a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [a.mr.sge(0, 16)] });
    const [r] = await collect(b.cq, 1);
    expect(r).toMatchObject({ wrId: 7, status: 'SUCCESS', byteLen: 16 });
    expect(b.mr.bytes.subarray(0, 16).every((v) => v === 9)).toBe(true);
  });
});

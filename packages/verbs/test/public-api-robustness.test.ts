// What a new user types in the first hour: each case got a raw TypeError, a silent
// acceptance or a misleading message on 7ca85fe, and gets a typed error now.
import { afterEach, describe, expect, it } from 'vitest';
import {
  Access,
  allocCompletions,
  CompletionQueue,
  type Device,
  type Endpoint,
  formatIbverbsEndpoint,
  ibverbsEndpoint,
  MemoryRegion,
  openDevice,
  parseIbverbsEndpoint,
  QueuePair,
  RdmaError,
  RdmaPostError,
} from '../src/index.js';
import { injectFault } from '../src/testing.js';
import { ALL, collect, type Pair, pair, side } from './harness/pair.js';

const code = (c: string) => expect.objectContaining({ code: c });

function thrown(f: () => unknown): RdmaError {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(RdmaError);
    return err as RdmaError;
  }
  throw new Error('expected a throw');
}

let p: Pair | undefined;
let dev: Device | undefined;
afterEach(() => {
  p?.close();
  p = undefined;
  dev?.close();
  dev = undefined;
});

describe('options objects', () => {
  it("openDevice('soft') is refused as a non-object instead of reading String.prototype.link", () => {
    const e = thrown(() => openDevice('soft' as never));
    expect(e.code).toBe('ERR_RDMA_INVALID_ARG');
    expect(e.message).toContain("string 'soft'");
    expect(e.message).not.toContain('native code');
  });

  it('inherited properties are not options', () => {
    const inherited = Object.create({ link: 'tcp' }) as object;
    expect(() => openDevice(inherited as never)).toThrow(code('ERR_RDMA_INVALID_ARG'));
  });

  it('an unknown option is named', () => {
    const e = thrown(() => openDevice({ provder: 'soft' } as never));
    expect(e.message).toContain("unknown option 'provder'");
  });

  it('integer messages show the type and the quoted value', () => {
    dev = openDevice({ provider: 'soft' });
    const pd = dev.allocPd();
    const e = thrown(() => pd.allocMr('64' as never, Access.LocalWrite));
    expect(e.code).toBe('ERR_RDMA_INVALID_ARG');
    expect(e.message).toContain("got string '64'");
  });
});

describe('completion queues', () => {
  it('waitForCompletion() without options applies the defaults', async () => {
    p = pair('soft');
    const { a, b } = p;
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 8)] });
    a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await b.cq.waitForCompletion();
    expect(b.cq.pending()).toBeGreaterThan(0);
  });

  it('a deadline setTimeout cannot honour is refused instead of firing at once', () => {
    dev = openDevice({ provider: 'soft' });
    const cq = dev.createCq();
    for (const timeoutMs of [Number.POSITIVE_INFINITY, 2 ** 31, -1])
      expect(() => cq.waitForCompletion({ timeoutMs })).toThrow(code('ERR_RDMA_OUT_OF_RANGE'));
    expect(() => cq.waitForCompletion({ timeoutMs: Number.NaN })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => cq.waitForCompletion({ timeoutMs: 1, signal: {} as AbortSignal })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
  });

  it('waitForCompletion refuses an unknown own option, not an inherited one', async () => {
    dev = openDevice({ provider: 'soft' });
    const cq = dev.createCq();
    expect(() => cq.waitForCompletion({ timeoutMs: 1, spinus: 5 } as never)).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => cq.waitForCompletion({ toString: 1 } as never)).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    // Known keys with an inherited extra: the wait runs (and times out, typed).
    const o = Object.assign(Object.create({ extra: 1 }), { timeoutMs: 1, spinUs: 0 });
    expect(() => cq.waitForCompletion(o)).toThrow(code('ERR_RDMA_INVALID_ARG')); // not plain
    await expect(cq.waitForCompletion({ timeoutMs: 1, spinUs: 0 })).rejects.toMatchObject({
      code: 'ERR_RDMA_TIMEOUT',
    });
  });

  it("'completion' listeners added after all were removed still get the event", async () => {
    p = pair('soft');
    const { a, b } = p;
    let first = 0;
    let second = 0;
    const one = () => first++;
    const two = () => second++;
    b.cq.on('completion', one).off('completion', one).on('completion', two);
    b.qp.postRecv({ wrId: 1, sgList: [b.mr.sge(0, 8)] });
    b.cq.requestNotify();
    a.qp.postSend({ wrId: 2, opcode: 'SEND', sgList: [a.mr.sge(0, 8)] });
    await b.cq.waitForCompletion({ timeoutMs: 5000 });
    await new Promise((r) => setImmediate(r));
    expect(first).toBe(0);
    expect(second).toBe(1);
  });

  it('allocCompletions refuses negative and fractional counts', () => {
    expect(() => allocCompletions(-1)).toThrow(code('ERR_RDMA_OUT_OF_RANGE'));
    expect(() => allocCompletions(1.5)).toThrow(code('ERR_RDMA_INVALID_ARG'));
    expect(() => allocCompletions('4' as never)).toThrow(code('ERR_RDMA_INVALID_ARG'));
    expect(allocCompletions(0)).toEqual([]);
  });

  it('poll with a bad output array takes no completion', async () => {
    p = pair('soft');
    const { a, b } = p;
    a.qp.postSend({
      wrId: 7,
      opcode: 'RDMA_WRITE',
      sgList: [a.mr.sge(0, 8)],
      remoteAddr: b.mr.addr,
      rkey: b.mr.rkey,
    });
    await a.cq.waitForCompletion({ timeoutMs: 5000 });
    const bad = [undefined, null, 'x', Object.freeze({ ...allocCompletions(1)[0] })];
    for (const record of bad)
      expect(() => a.cq.poll([record] as never)).toThrow(code('ERR_RDMA_INVALID_ARG'));
    expect(() => a.cq.poll('x' as never)).toThrow(code('ERR_RDMA_INVALID_ARG'));
    expect(a.cq.pending()).toBe(1);
    expect((await collect(a.cq, 1))[0]?.wrId).toBe(7);
  });
});

describe('work requests', () => {
  it('addresses JS cannot represent exactly are refused before the native cast', () => {
    p = pair('soft');
    const { a, b } = p;
    const write = (remoteAddr: number) => ({
      wrId: 1,
      opcode: 'RDMA_WRITE' as const,
      sgList: [a.mr.sge(0, 8)],
      remoteAddr,
      rkey: b.mr.rkey,
    });
    for (const addr of [2 ** 64, 2 ** 53])
      expect(() => a.qp.postSend(write(addr))).toThrow(code('ERR_RDMA_OUT_OF_RANGE'));
    expect(() => a.qp.postSend(write(Number.POSITIVE_INFINITY))).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() =>
      a.qp.postSend({ wrId: 1, opcode: 'SEND', sgList: [{ addr: 2 ** 70, length: 8, lkey: 1 }] }),
    ).toThrow(code('ERR_RDMA_OUT_OF_RANGE'));
    // Names an object literal inherits, and near misses, are not opcodes.
    for (const opcode of ['toString', '__proto__', 'constructor', 'hasOwnProperty', 'send', 1])
      expect(() => a.qp.postSend({ wrId: 1, opcode: opcode as never, sgList: [] })).toThrow(
        code('ERR_RDMA_INVALID_ARG'),
      );
  });

  it('a partly posted batch is an RdmaPostError that says how many went in', () => {
    p = pair('soft', { maxSendWr: 4 });
    const { a } = p;
    const send = (i: number) => ({
      wrId: i,
      opcode: 'SEND' as const,
      sgList: [a.mr.sge(0, 8)],
    });
    const e = thrown(() => a.qp.postSend(Array.from({ length: 6 }, (_, i) => send(i))));
    expect(e).toBeInstanceOf(RdmaPostError);
    expect(e).toMatchObject({ code: 'ERR_RDMA_QUEUE_FULL', retryable: true });
    expect((e as RdmaPostError).posted).toBeLessThanOrEqual(4);
  });
});

describe('endpoints are untrusted input', () => {
  it('soft endpoint fields out of the native ranges are refused before the transition', () => {
    const a = side('soft');
    const b = side('soft');
    try {
      a.qp.toInit();
      const ep = b.qp.endpoint();
      for (const bad of [
        { slot: 4096 },
        { slot: 2 ** 40 },
        { gen: -1 },
        { pid: 0 },
        { segFd: 2 ** 31 },
        { nonce: 2 ** 53 },
        { bootId: 42 },
        { provider: 'ibverbs' },
      ]) {
        expect(() => a.qp.toRtr({ ...ep, ...bad } as Endpoint)).toThrow(
          code('ERR_RDMA_INVALID_ARG'),
        );
        expect(a.qp.state).toBe('init');
      }
      const inherited = Object.create(ep) as Endpoint;
      expect(() => a.qp.toRtr(inherited)).toThrow(code('ERR_RDMA_INVALID_ARG'));
    } finally {
      a.dev.close();
      b.dev.close();
    }
  });

  it('listening on every interface advertises an address a peer can dial', async () => {
    dev = openDevice({ provider: 'soft' });
    const addr = await dev.listen({ host: '0.0.0.0', advertise: '127.0.0.1' });
    expect(addr.host).toBe('127.0.0.1');
    const pd = dev.allocPd();
    const cq = dev.createCq();
    const qp = pd.createQp({ sendCq: cq, recvCq: cq });
    const ep = qp.endpoint();
    expect(ep.provider === 'soft' && ep.tcp?.host).toBe('127.0.0.1');
    const other = openDevice({ provider: 'soft' });
    try {
      const a = await other.listen({ host: '0.0.0.0' });
      expect(a.host).not.toBe('0.0.0.0');
    } catch (err) {
      // A host without an external interface says so and how to fix it.
      expect(err).toMatchObject({ code: 'ERR_RDMA_INVALID_ARG' });
      expect((err as Error).message).toContain('advertise');
    } finally {
      other.close();
    }
  });
});

describe('foreign ibverbs endpoints', () => {
  it('are built from the fields a libibverbs program exchanges, MTU in bytes or enum', () => {
    const ep = ibverbsEndpoint({ qpn: 0x12, psn: 0xa3c, mtu: 1024, gid: '::ffff:10.0.0.2' });
    expect(ep).toEqual({
      provider: 'ibverbs',
      transport: 'roce',
      qpn: 0x12,
      psn: 0xa3c,
      lid: 0,
      gid: '0000:0000:0000:0000:0000:ffff:0a00:0002',
      gidIndex: 0,
      port: 1,
      mtu: 3,
      maxRdAtomic: 1,
    });
    expect(ibverbsEndpoint({ qpn: 1, psn: 2, mtu: 3 }).mtu).toBe(3);
    expect(() => ibverbsEndpoint({ qpn: 1, psn: 2, mtu: 1500 })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => ibverbsEndpoint({ qpn: 2 ** 24, psn: 2, mtu: 3 })).toThrow(
      code('ERR_RDMA_OUT_OF_RANGE'),
    );
  });

  it("round-trip ibv_rc_pingpong's LID:QPN:PSN:GID text", () => {
    const text = '0000:000012:000a3c:00000000000000000000ffff0a000002';
    const ep = parseIbverbsEndpoint(text, { mtu: 4096 });
    expect(ep).toMatchObject({ lid: 0, qpn: 0x12, psn: 0xa3c, mtu: 5 });
    expect(formatIbverbsEndpoint(ep)).toBe(text);
    expect(() => parseIbverbsEndpoint('12:34', { mtu: 4096 })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
  });
});

describe('the surface', () => {
  it('classes are made by their factories only', () => {
    expect(() => new (CompletionQueue as never as new () => unknown)()).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => new (QueuePair as never as new () => unknown)()).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => new (MemoryRegion as never as new () => unknown)()).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
  });

  it('exposes no emitter anyone could emit on, and no native handles', () => {
    dev = openDevice({ provider: 'soft' });
    const cq = dev.createCq();
    expect(Object.keys(cq)).not.toContain('events');
    expect('events' in cq).toBe(false);
    expect('handle' in cq).toBe(false);
    expect(() => cq.on('bogus' as never, () => undefined)).toThrow(code('ERR_RDMA_INVALID_ARG'));
  });

  it('closing a device closes QPs before the SRQs and CQs they use', () => {
    dev = openDevice({ provider: 'soft' });
    const pd = dev.allocPd();
    const srq = pd.createSrq();
    const cq = dev.createCq(); // made after the PD: creation order alone would close it first
    const qp = pd.createQp({ sendCq: cq, recvCq: cq, srq });
    const mr = pd.allocMr(64, ALL);
    dev.close();
    expect([qp.closed, srq.closed, cq.closed, mr.closed, pd.closed]).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
    dev = undefined;
  });

  it('an SRQ of another protection domain is refused', () => {
    dev = openDevice({ provider: 'soft' });
    const cq = dev.createCq();
    const srq = dev.allocPd().createSrq();
    expect(() => dev?.allocPd().createQp({ sendCq: cq, recvCq: cq, srq })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
  });

  it('fault injection lives in @rdmajs/verbs/testing and checks its input', () => {
    p = pair('soft');
    expect('injectFault' in p.a.qp).toBe(false);
    expect(() => injectFault(p?.a.qp as QueuePair, { type: 'delay', ms: -1 })).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    expect(() => injectFault(p?.a.qp as QueuePair, { type: 'nope' } as never)).toThrow(
      code('ERR_RDMA_INVALID_ARG'),
    );
    injectFault(p.a.qp, { type: 'break-qp' });
    expect(p.a.qp.state).toBe('error');
  });

  it('64-bit device limits are exact bigints', () => {
    dev = openDevice({ provider: 'soft' });
    expect(typeof dev.info.limits.maxMrSize).toBe('bigint');
  });
});

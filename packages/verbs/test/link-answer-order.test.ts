// The TCP link's initiator against a target it cannot trust with its timers: answers must
// come in the order the requests went (the target runs them in order), and bytes for one
// QP's frames keep that QP's ACK timer alive, not every QP's on the connection.
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { openDevice, type SoftEndpoint } from '../src/index.js';
import { ABI } from '../src/internal/abi.js';
import {
  ANSWER_BIT,
  LINK_PROGRESS,
  REQ_HEADER,
  RES_HEADER,
} from '../src/internal/soft/link/frames.js';
import {
  AUTH_BYTES,
  LINK_VERSION,
  newSecret,
  qpLinkKey,
  TargetHandshake,
} from '../src/internal/soft/link/handshake.js';
import { collect, providers, type Side, sideOn, sleep, until } from './harness/pair.js';

interface Frame {
  reqId: number;
  token: number;
  opcode: number;
}

interface Conn {
  sock: Socket;
  frames: Frame[];
  closed: boolean;
}

/** A link target that completes the handshake, records request frames and answers only as told. */
class FakeTarget {
  readonly secret = newSecret();
  readonly conns: Conn[] = [];
  readonly #server: Server;

  constructor() {
    this.#server = createServer((sock) => this.#serve(sock));
  }

  async listen(): Promise<number> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    return (this.#server.address() as { port: number }).port;
  }

  #serve(sock: Socket): void {
    const conn: Conn = { sock, frames: [], closed: false };
    this.conns.push(conn);
    sock.on('close', () => {
      conn.closed = true;
    });
    sock.on('error', () => undefined);
    const hs = new TargetHandshake(this.secret);
    sock.write(hs.hello(64 << 20));
    let buf = Buffer.alloc(0);
    let authed = false;
    let skip = 0; // payload bytes of the last frame still to come (dropped, not kept)
    sock.on('data', (chunk: Buffer) => {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length);
        skip -= n;
        chunk = chunk.subarray(n);
      }
      buf = Buffer.concat([buf, chunk]);
      if (!authed) {
        if (buf.length < AUTH_BYTES) return;
        const ok = hs.verify(buf.subarray(0, AUTH_BYTES));
        if (!ok) return void sock.destroy();
        authed = true;
        sock.write(ok.welcome);
        buf = buf.subarray(AUTH_BYTES);
      }
      while (skip === 0 && buf.length >= REQ_HEADER) {
        const len = buf.readUInt32LE(0);
        conn.frames.push({
          reqId: buf.readUInt32LE(4),
          opcode: buf.readUInt8(8),
          token: buf.readUInt32LE(48),
        });
        const here = Math.min(len, buf.length);
        skip = len - here;
        buf = buf.subarray(here);
      }
    });
  }

  answer(c: Conn, reqId: number, outcome: number = ABI.LINK_DONE): void {
    const b = Buffer.alloc(RES_HEADER);
    b.writeUInt32LE((ANSWER_BIT | RES_HEADER) >>> 0, 0);
    b.writeUInt32LE(reqId, 4);
    b.writeUInt8(outcome, 8);
    c.sock.write(b);
  }

  close(): void {
    for (const c of this.conns) c.sock.destroy();
    this.#server.close();
  }
}

describe.runIf(providers.includes('soft'))(
  'soft TCP link: answers in order, progress per QP',
  () => {
    let fake: FakeTarget | undefined;
    let close: (() => void) | undefined;
    afterEach(() => {
      close?.();
      fake?.close();
      close = undefined;
      fake = undefined;
    });

    /** A side whose QPs will reach `fake` as if it were the QP `template` names. */
    async function setup(mrBytes = 1 << 16): Promise<{ side: Side; ep: SoftEndpoint }> {
      fake = new FakeTarget();
      const port = await fake.listen();
      // A real endpoint's fields, its link address replaced by the fake target's.
      const peer = openDevice({ provider: 'soft', link: 'tcp' });
      await peer.listen();
      const real = sideOn(peer).qp.endpoint() as SoftEndpoint;
      const target = { slot: real.slot, gen: real.gen };
      const ep: SoftEndpoint = {
        ...real,
        tcp: {
          host: '127.0.0.1',
          port,
          key: qpLinkKey(fake.secret, target).toString('base64url'),
          version: LINK_VERSION,
        },
      };
      const dev = openDevice({ provider: 'soft', link: 'tcp' });
      const side = sideOn(dev, { mrBytes, maxSendWr: 8 });
      close = () => {
        dev.close();
        peer.close();
      };
      return { side, ep };
    }

    it('an answer out of order drops the connection; the window then completes in order over a new one', async () => {
      const { side, ep } = await setup();
      const f = fake as FakeTarget;
      side.qp.connect(ep, { timeout: 18, retryCount: 3 });
      for (const wrId of [1, 2])
        side.qp.postSend({ wrId, opcode: 'SEND', sgList: [side.mr.sge(0, 8)] });
      await until(() => (f.conns[0]?.frames.length ?? 0) === 2, 'both requests at the target');
      const first = f.conns[0] as Conn;
      // The second request answered before the first: not how a target that runs them in order
      // answers. The initiator must not complete WR 2 ahead of WR 1.
      f.answer(first, (first.frames[1] as Frame).reqId);
      await until(() => first.closed, 'the initiator to drop the connection');
      expect(side.cq.pending()).toBe(0);
      // Re-sent over a new connection (same tokens): answered in order, both complete in order.
      await until(() => (f.conns[1]?.frames.length ?? 0) === 2, 'the window re-sent');
      const again = f.conns[1] as Conn;
      expect(again.frames.map((x) => x.token)).toEqual(first.frames.map((x) => x.token));
      for (const fr of again.frames) f.answer(again, fr.reqId);
      const wcs = await collect(side.cq, 2);
      expect(wcs.map((w) => [w.wrId, w.status])).toEqual([
        [1, 'SUCCESS'],
        [2, 'SUCCESS'],
      ]);
    });

    it("PROGRESS for one QP's large WRITE does not keep another QP's silent SEND alive", async () => {
      const size = 32 << 20;
      const { side, ep } = await setup(size);
      const f = fake as FakeTarget;
      const pd = side.pd;
      // Two QPs bound to the same remote QP: each pair has its own connection (protocol 4).
      const q2 = pd.createQp({ sendCq: side.cq, recvCq: side.cq, maxSendWr: 8, maxSendSge: 1 });
      const opts = { timeout: 16, retryCount: 1 }; // ≈ 268 ms per try
      side.qp.connect(ep, opts);
      q2.connect(ep, opts);
      side.qp.postSend({
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList: [side.mr.sge(0, size)],
        remoteAddr: 0,
        rkey: 1,
      });
      const carrying = (op: number) => f.conns.find((x) => x.frames.some((r) => r.opcode === op));
      await until(() => carrying(ABI.OP_RDMA_WRITE) !== undefined, 'the WRITE at the target');
      // Posted once the WRITE is through: nothing of the WRITE's moves for it any more.
      q2.postSend({ wrId: 2, opcode: 'SEND', sgList: [side.mr.sge(0, 8)] });
      await until(() => carrying(ABI.OP_SEND) !== undefined, 'the SEND at the target');
      const c = carrying(ABI.OP_RDMA_WRITE) as Conn;
      const writeReq = (c.frames[0] as Frame).reqId;
      // The target reports progress on the WRITE (one per MiB it carried, the most it may)
      // and never answers the SEND.
      const wcs = [];
      let reports = 0;
      while (reports < 32 && side.cq.pending() === 0) {
        const b = Buffer.alloc(RES_HEADER);
        b.writeUInt32LE((ANSWER_BIT | RES_HEADER) >>> 0, 0);
        b.writeUInt32LE(writeReq, 4);
        b.writeUInt8(LINK_PROGRESS, 8);
        c.sock.write(b);
        reports++;
        await sleep(50);
      }
      // The SEND's QP timed out while the WRITE's was still kept alive by its progress.
      expect(reports).toBeLessThan(32);
      wcs.push(...(await collect(side.cq, 1)));
      expect(wcs.map((w) => [w.wrId, w.status])).toEqual([[2, 'RETRY_EXC_ERR']]);
      expect(c.closed).toBe(false);
    });
  },
);

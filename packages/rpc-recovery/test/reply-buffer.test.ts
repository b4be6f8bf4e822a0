import {
  type MessagePart,
  partBytes,
  RdmaChannel,
  type RdmaConnection,
  RdmaTransport,
} from '@rdmajs/mux';
import { afterAll, describe, expect, it, vi } from 'vitest';

type RegisteredAllocator = RdmaConnection['allocator'];

import {
  decodeRpcFrame,
  encodeRequestHeader,
  MethodRegistry,
  type ReplyBlock,
  type ReplyBuffer,
  RpcClient,
  RpcServer,
  RpcStatus,
} from '../src/index.js';

const secret = 'reply-buffer-test-secret-0123456789';

function request(method: string, payload: Uint8Array, requestId = 1): Uint8Array {
  const header = encodeRequestHeader({
    requestId,
    sessionSeq: 0,
    ackBelow: 0,
    epoch: 1,
    idempotent: true,
    deadlineMs: 1000,
    method,
    payloadLength: payload.length,
  });
  const out = new Uint8Array(header.length + payload.length);
  out.set(header, 0);
  out.set(payload, header.length);
  return out;
}

function joined(parts: MessagePart[] | undefined): Uint8Array {
  const bytes = (parts ?? []).map(partBytes);
  const out = new Uint8Array(bytes.reduce((n, b) => n + b.length, 0));
  let o = 0;
  for (const b of bytes) {
    out.set(b, o);
    o += b.length;
  }
  return out;
}

/** The payload's i-th byte: a pattern the client checks. */
const pattern = (n: number, seed: number) =>
  Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff);

const server = new RdmaTransport();
const client = new RdmaTransport();
afterAll(() => {
  server.close();
  client.close();
});

/**
 * Reply memory over registered memory (the server transport's allocator, or what `from()`
 * names when called: a connection's pool) that remembers every block it gave.
 */
function countingMemory(from: () => RegisteredAllocator = () => server.allocator): {
  memory: (n: number) => ReplyBlock;
  given: ReplyBlock[];
} {
  const given: ReplyBlock[] = [];
  return {
    given,
    memory: (n) => {
      const b = from().alloc(n, 'remote-read');
      given.push(b);
      return b;
    },
  };
}

describe('ReplyBuffer: replies built in place', () => {
  it('on the heap without reply memory: the frame decodes to the payload written', async () => {
    const reg = new MethodRegistry();
    reg.register(
      'fill',
      (p, ctx) => {
        const r = ctx.allocateReply(p.length * 2);
        r.payload.set(p, 0);
        r.payload.set(p, p.length);
        expect(r.registered).toBe(false);
        return r;
      },
      { idempotent: true },
    );
    const parts = await reg.dispatch(request('fill', Uint8Array.of(1, 2, 3)), { epoch: 1 });
    expect(parts).toHaveLength(1);
    const f = decodeRpcFrame(joined(parts));
    expect(f.kind).toBe('response');
    if (f.kind !== 'response') return;
    expect(f.header.status).toBe(RpcStatus.Ok);
    expect([...f.payload]).toEqual([1, 2, 3, 1, 2, 3]);
  });

  it('reply memory that gives nothing (a shared pool at its limit): the reply is built on the heap', async () => {
    const reg = new MethodRegistry();
    reg.register(
      'fill',
      (p, ctx) => {
        const r = ctx.allocateReply(p.length);
        r.payload.set(p);
        expect(r.registered).toBe(false);
        return r;
      },
      { idempotent: true },
    );
    const memory = Object.assign(() => undefined, { registered: true });
    const parts = await reg.dispatch(request('fill', Uint8Array.of(4, 5)), {
      epoch: 1,
      replyMemory: memory,
    });
    expect(parts).toHaveLength(1);
    expect(parts?.[0]).toBeInstanceOf(Uint8Array);
    const f = decodeRpcFrame(joined(parts));
    expect(f.kind === 'response' && [...f.payload]).toEqual([4, 5]);
  });

  it('in reply memory: one block part; released when the handler fails or returns another reply', async () => {
    const { memory, given } = countingMemory();
    const reg = new MethodRegistry();
    let stolen: ReplyBuffer | undefined;
    reg.register('ok', (_p, ctx) => ctx.allocateReply(100), { idempotent: true });
    reg.register(
      'throws',
      (_p, ctx) => {
        ctx.allocateReply(64);
        throw new Error('after allocating');
      },
      { idempotent: true },
    );
    reg.register(
      'rejects',
      async (_p, ctx) => {
        ctx.allocateReply(64);
        await Promise.resolve();
        throw new Error('later');
      },
      { idempotent: true },
    );
    reg.register(
      'two',
      (_p, ctx) => {
        ctx.allocateReply(8);
        stolen = ctx.allocateReply(8);
        return stolen;
      },
      { idempotent: true },
    );
    reg.register('foreign', () => stolen as ReplyBuffer, { idempotent: true });
    const scope = { epoch: 1, replyMemory: memory };
    const ok = await reg.dispatch(request('ok', new Uint8Array(0)), scope);
    expect(ok).toHaveLength(1);
    expect(ok?.[0]).not.toBeInstanceOf(Uint8Array); // a block (slice): sent without a copy
    expect(partBytes(ok?.[0] as MessagePart).length).toBe(20 + 100);
    for (const m of ['throws', 'rejects']) {
      const f = decodeRpcFrame(joined(await reg.dispatch(request(m, new Uint8Array(0)), scope)));
      expect(f.kind === 'response' && f.header.status).toBe(RpcStatus.Error);
    }
    const two = await reg.dispatch(request('two', new Uint8Array(0)), scope);
    const foreign = decodeRpcFrame(
      joined(await reg.dispatch(request('foreign', new Uint8Array(0)), scope)),
    );
    expect(foreign.kind === 'response' && foreign.header.errorCode).toBe('ERR_RPC_INVALID_ARG');
    // ok + throws + rejects + two (2) = 5 blocks; the ones sent are still held by their response.
    expect(given).toHaveLength(5);
    expect(given.map((b) => b.released)).toEqual([false, true, true, true, false]);
    for (const parts of [ok, two]) {
      const p = parts?.[0] as { block?: ReplyBlock } & ReplyBlock;
      (p.block ?? p).release();
    }
  });

  it('over RDMA: eager and rendezvous replies go from their blocks, and every block is released', async () => {
    // Built in the connection's own pool, as PsService does: sent in place, even by READ.
    let pool: RegisteredAllocator | undefined;
    const { memory, given } = countingMemory(() => pool as RegisteredAllocator);
    const reg = new MethodRegistry();
    reg.register(
      'blob',
      (p, ctx) => {
        const n = new DataView(p.buffer, p.byteOffset, 4).getUint32(0, true);
        const r = ctx.allocateReply(n);
        r.payload.set(pattern(n, n));
        return r;
      },
      { idempotent: true },
    );
    const rpc = new RpcServer(reg, { key: new Uint8Array(32).fill(9) });
    await using listener = await server.listen({ port: 0, secret });
    listener.on('connection', (c) => {
      pool = (c as RdmaConnection).allocator;
      rpc.serve(c, { replyMemory: memory });
    });
    // What the server hands its channel: the parts of each reply.
    const sent: MessagePart[][] = [];
    const send = RdmaChannel.prototype.send;
    RdmaChannel.prototype.send = function (this: RdmaChannel, m, o) {
      if (this.connection.role === 'server' && this.name === 'rpc') sent.push([m].flat());
      return send.call(this, m, o);
    };
    const c = await RpcClient.connect({ transport: client, port: listener.port, secret });
    try {
      for (const n of [0, 100, 4000, 64 << 10, 1 << 20]) {
        const req = new Uint8Array(4);
        new DataView(req.buffer).setUint32(0, n, true);
        using reply = await c.callView('blob', req, { idempotent: true });
        expect(reply.bytes.length).toBe(n);
        expect(Buffer.from(reply.bytes).equals(Buffer.from(pattern(n, n)))).toBe(true);
      }
    } finally {
      RdmaChannel.prototype.send = send;
      await c.close();
    }
    expect(sent).toHaveLength(5);
    for (const parts of sent) {
      expect(parts).toHaveLength(1); // header and payload in one registered block
      const p = parts[0] as MessagePart;
      expect(p).not.toBeInstanceOf(Uint8Array);
      const block = 'block' in p ? (p as { block: ReplyBlock }).block : (p as ReplyBlock);
      expect(pool?.owns(block)).toBe(true);
    }
    expect(given).toHaveLength(5);
    // Released by the transport at each send's completion (reaped asynchronously).
    await vi.waitFor(() => expect(given.every((b) => b.released)).toBe(true), { timeout: 5000 });
  });
});

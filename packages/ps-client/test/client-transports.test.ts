import { RdmaTransport, type RdmaTransportOptions } from '@rdmajs/mux';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { ExponentialBackoff } from '@rdmajs/rpc-recovery';
import { TcpTransport, type TcpTransportOptions } from '@rdmajs/tcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withPsCreditFlush } from '../src/ClientTransports.js';
import {
  PS_CREDIT_FLUSH_MS,
  PsClient,
  type PsClientOptions,
  type ShardSpec,
} from '../src/index.js';

const secret = 'ps-client-transport-secret-0123456789';
const spec = {
  tables: [
    {
      name: 'emb',
      dim: 8,
      optimizer: { kind: 'adagrad', lr: 0.1 },
      init: { kind: 'normal', seed: 5, std: 0.1 },
    },
  ],
};
const serverRdma: RdmaTransport[] = [];
const both: PsService[] = [];
let tcpOnly: PsService;

beforeAll(async () => {
  for (const id of ['a', 'b']) {
    const r = new RdmaTransport();
    serverRdma.push(r);
    both.push(
      await PsService.start({
        listen: [{ transport: r }, { transport: new TcpTransport() }],
        secret,
        shardId: id,
        tables: parseServiceTables(spec),
      }),
    );
  }
  // A shard that speaks TCP only: an 'auto' client's RDMA setup to it fails.
  tcpOnly = await PsService.start({
    transport: new TcpTransport(),
    secret,
    shardId: 'a',
    tables: parseServiceTables(spec),
  });
});

afterAll(async () => {
  await Promise.all([...both, tcpOnly].map((s) => s?.close()));
  for (const r of serverRdma) r.close();
});

const servers = (): ShardSpec[] =>
  both.map((s) => ({
    host: '127.0.0.1',
    ports: { rdma: s.portOf('rdma') as number, tcp: s.portOf('tcp') as number },
  }));
const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));
/** The rows of a pull (a Float32Array, or a result holding them in `rows`). */
const rowsOf = async (p: Promise<unknown>): Promise<Float32Array> => {
  const r = (await p) as Float32Array | { rows: Float32Array };
  return r instanceof Float32Array ? r : r.rows;
};
const keys = BigUint64Array.from([3n, 1n << 40n, 3n, 77n, 12345n, 9n]);

describe('PsClient transport choice', () => {
  it("'rdma', 'tcp' and 'auto' reach the same shards and read the same rows", async () => {
    const grads = new Float32Array(keys.length * 8).map((_, i) => ((i % 7) - 3) / 8);
    let reference: number[] | undefined;
    for (const transport of ['rdma', 'tcp', 'auto'] as const) {
      await using ps = await PsClient.connect({
        servers: servers(),
        transport,
        secret,
        probeIntervalMs: 0,
      });
      const st = ps.stats();
      expect(st.transport).toBe(transport);
      const wire = transport === 'tcp' ? 'tcp' : 'rdma';
      expect(st.shards.map((s) => [s.transport, s.onFallback, s.fallbacks])).toEqual([
        [wire, false, 0],
        [wire, false, 0],
      ]);
      await ps.push('emb', keys, grads);
      const rows = await rowsOf(ps.pull('emb', keys));
      // Each client pushed once more: rows differ per round, but every transport gets what the
      // shards hold, so read them back over TCP too and compare bit for bit.
      await using check = await PsClient.connect({
        servers: servers(),
        transport: 'tcp',
        secret,
      });
      expect(bits(rows)).toEqual(bits(await rowsOf(check.pull('emb', keys))));
      if (reference !== undefined) expect(bits(rows)).not.toEqual(reference);
      reference = bits(rows);
    }
  });

  it("'auto' falls back to TCP when the shard refuses RDMA, visible in stats()", async () => {
    await using ps = await PsClient.connect({
      servers: [`127.0.0.1:${tcpOnly.port}`],
      transport: 'auto',
      secret,
      probeIntervalMs: 0,
      // The RDMA attempt waits this long for a setup answer a TCP-only listener never sends.
      connectTimeoutMs: 2000,
    });
    const s = ps.stats().shards[0];
    expect(s?.transport).toBe('tcp');
    expect(s?.onFallback).toBe(true);
    expect(s?.fallbacks).toBeGreaterThanOrEqual(1);
    await ps.push('emb', BigUint64Array.of(1n), new Float32Array(8).fill(1));
    expect((await rowsOf(ps.pull('emb', BigUint64Array.of(1n)))).length).toBe(8);
  });

  it("'rdma' to a TCP-only shard fails typed (no silent downgrade)", async () => {
    const err = await PsClient.connect({
      servers: [`127.0.0.1:${tcpOnly.port}`],
      transport: 'rdma',
      secret,
      connectTimeoutMs: 2000,
      backoff: () => new ExponentialBackoff({ baseMs: 10, maxAttempts: 2, deadlineMs: 3000 }),
    }).then(
      () => undefined,
      (e: { code?: string }) => e,
    );
    expect(err?.code).toBe('ERR_PS_CLIENT_UNAVAILABLE');
  });

  it('refuses bad transport values and bad ports before connecting', async () => {
    const code = (o: unknown) =>
      PsClient.connect(o as PsClientOptions).then(
        () => 'resolved',
        (e: { code?: string }) => e.code,
      );
    const base = { servers: ['127.0.0.1:1'], secret };
    for (const transport of ['udp', 'RDMA', 7, null, {}, { name: 'x' }]) {
      expect(await code({ ...base, transport })).toBe('ERR_PS_CLIENT_INVALID_ARG');
    }
    expect(await code({ ...base, transport: 'tcp', probeIntervalMs: -1 })).toBe(
      'ERR_PS_CLIENT_INVALID_ARG',
    );
    for (const ports of [{ rdma: 0 }, { tcp: 70_000 }, { udp: 5 }, null]) {
      expect(await code({ servers: [{ ports }], secret, transport: 'tcp' })).toBe(
        'ERR_PS_CLIENT_INVALID_ARG',
      );
    }
  });

  it('pull() over RDMA returns views of the replies, built in registered memory on the server', async () => {
    await using ps = await PsClient.connect({ servers: servers(), transport: 'rdma', secret });
    const registered = async () =>
      (
        await Promise.all(both.map(async (s) => (await s.metrics.registeredReplies.get()).values))
      ).reduce((n, v) => n + (v[0]?.value ?? 0), 0);
    const before = await registered();
    // Distinct keys of shard 'a' only: one reply holds exactly the request.
    const onA = BigUint64Array.from(
      Array.from({ length: 400 }, (_, i) => BigInt(i * 7919 + 1)).filter(
        (k) => ps.shardOf(k) === 'a',
      ),
    ).subarray(0, 64);
    const single = await ps.pull('emb', onA);
    expect(single.contiguous).toBe(true);
    const rows = single.rows;
    expect(single.rows).toBe(rows); // the same view, not a fresh copy
    expect(single.row(3).buffer).toBe(rows.buffer);
    expect(single.row(3).byteOffset).toBe(rows.byteOffset + 3 * 8 * 4);
    const copy = rows.slice();
    // Several shards and duplicates: rows of both replies, in request order.
    const mixed = BigUint64Array.from([...onA.subarray(0, 4), 5n, 6n, 7n, onA[0] as bigint]);
    const many = await ps.pull('emb', mixed);
    expect(many.contiguous).toBe(false);
    expect(bits(many.row(7))).toEqual(bits(copy.subarray(0, 8)));
    expect(bits(many.row(2))).toEqual(bits(copy.subarray(16, 24)));
    expect(await registered()).toBe(before + 1 + 2); // one reply, then one per shard
    single.release();
    many.release();
    single.release(); // idempotent
    expect(() => single.row(0)).toThrow(
      expect.objectContaining({ code: 'ERR_PS_CLIENT_RELEASED' }),
    );
    expect(() => many.rows).toThrow(expect.objectContaining({ code: 'ERR_PS_CLIENT_RELEASED' }));
    // pullInto copies into the caller's array (and releases at once).
    const out = new Float32Array(onA.length * 8);
    await ps.pullInto('emb', onA, out);
    expect(bits(out)).toEqual(bits(copy));
  });

  it('over RDMA no JS code copies the rows of a pull used as views; pullInto copies them once', async () => {
    await using ps = await PsClient.connect({ servers: servers(), transport: 'rdma', secret });
    const dim = 8;
    const n = 256;
    const rowBytes = dim * 4;
    const keysOf = (k: number) =>
      BigUint64Array.from({ length: n }, (_, i) => BigInt(k * 1000 + i + 1));
    // Bytes copied by typed-array set/slice calls of at least one row (keys and rows alike).
    let copied = 0;
    const proto = Object.getPrototypeOf(Uint8Array.prototype) as {
      set: (this: Uint8Array, src: ArrayLike<number>, offset?: number) => void;
      slice: (this: Uint8Array, ...a: number[]) => Uint8Array;
    };
    const { set, slice } = proto;
    const measure = async (run: (k: number) => Promise<void>): Promise<number> => {
      for (let k = 0; k < 3; k++) await run(k); // warm
      copied = 0;
      proto.set = function (src, offset) {
        const b =
          (src as { byteLength?: number }).byteLength ?? src.length * this.BYTES_PER_ELEMENT;
        if (b >= rowBytes) copied += b;
        return set.call(this, src, offset);
      };
      proto.slice = function (...a) {
        const r = slice.apply(this, a);
        if (r.byteLength >= rowBytes) copied += r.byteLength;
        return r;
      };
      try {
        for (let k = 0; k < 20; k++) await run(k);
      } finally {
        proto.set = set;
        proto.slice = slice;
      }
      return copied / 20 / (n * rowBytes);
    };
    const views = await measure(async (k) => {
      using rows = await ps.pull('emb', keysOf(k));
      expect(rows.row(n - 1).length).toBe(dim);
    });
    const out = new Float32Array(n * dim);
    const into = await measure((k) => ps.pullInto('emb', keysOf(k), out));
    // What is left in `views` is the request's keys, 8 bytes per 32-byte row, copied once
    // (by mux from the heap request into a registered send buffer; the server views them in
    // place, as the RPC frame pads its method to keep the payload 8-aligned; the client
    // writes each key once, straight into its shard's request, which counts no copy here):
    // 0.25, no row bytes.
    const keyShare = 8 / rowBytes;
    expect(views).toBeGreaterThanOrEqual(keyShare);
    expect(views).toBeLessThan(keyShare + 0.1);
    // pullInto: exactly one copy of the rows more.
    expect(into - views).toBeGreaterThan(0.95);
    expect(into - views).toBeLessThan(1.05);
  });
});

describe('PsClient: the transports it makes', () => {
  it("take the PS's credit flush delay unless the caller chose one", () => {
    expect(PS_CREDIT_FLUSH_MS).toBeGreaterThan(5); // longer than mux's and tcp's default, on purpose
    expect(withPsCreditFlush(undefined)).toEqual({ creditFlushMs: PS_CREDIT_FLUSH_MS });
    expect(withPsCreditFlush<RdmaTransportOptions>({ pollPolicy: 'busy' })).toEqual({
      creditFlushMs: PS_CREDIT_FLUSH_MS,
      pollPolicy: 'busy',
    });
    expect(withPsCreditFlush<TcpTransportOptions>({ frameProtection: 'none' })).toEqual({
      creditFlushMs: PS_CREDIT_FLUSH_MS,
      frameProtection: 'none',
    });
    expect(withPsCreditFlush({ creditFlushMs: 1 })).toEqual({ creditFlushMs: 1 });
  });
});

import { RdmaTransport } from '@rdmajs/mux';
import { PsService, parseServiceTables } from '@rdmajs/ps-service';
import { STORE_VIEW, STORE_VIEW_HEADER } from '@rdmajs/ps-wire';
import { TcpTransport } from '@rdmajs/tcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PsClient } from '../src/index.js';

// One-sided fetches end to end over soft: shards serve `oneSidedRead` tables from read
// regions of their RDMA transport; RDMA clients READ the rows, TCP clients and the off switch
// pull two-sided; every path must give the same rows.
const secret = 'ps-client-one-sided-secret-012345';
const spec = {
  tables: [
    {
      name: 'emb',
      dim: 8,
      optimizer: { kind: 'adagrad', lr: 0.1 },
      init: { kind: 'normal', seed: 5, std: 0.1 },
      budgetBytes: 1 << 20,
      oneSidedRead: true,
    },
    {
      name: 'half',
      dim: 6,
      rowDtype: 'f16',
      optimizer: { kind: 'sum' },
      init: { kind: 'uniform', seed: 2, low: -1, high: 1 },
      budgetBytes: 1 << 20,
      oneSidedRead: true,
    },
    { name: 'plain', dim: 4, optimizer: { kind: 'sum' } },
  ],
};
const ids = ['a', 'b'];
const serverRdma = ids.map(() => new RdmaTransport());
const services: (PsService | undefined)[] = [];
const ports: { rdma: number; tcp: number }[] = [];

async function startShard(i: number, p?: { rdma: number; tcp: number }): Promise<PsService> {
  const s = await PsService.start({
    listen: [
      { transport: serverRdma[i] as RdmaTransport, port: p?.rdma ?? 0 },
      { transport: new TcpTransport(), port: p?.tcp ?? 0 },
    ],
    secret,
    shardId: ids[i] as string,
    tables: parseServiceTables(spec),
  });
  services[i] = s;
  ports[i] = { rdma: s.portOf('rdma') as number, tcp: s.portOf('tcp') as number };
  return s;
}

const connect = (
  transport: 'rdma' | 'tcp',
  oneSidedReads?: boolean,
  more?: {
    oneSidedReaders?: unknown;
    oneSidedSlotHints?: unknown;
    oneSidedMaxLoad?: unknown;
    oneSidedBusyMaxKeys?: unknown;
  },
) =>
  PsClient.connect({
    servers: ports.map((p) => ({ port: p[transport], ports: p })),
    transport,
    secret,
    deadlineMs: 5000,
    ...(oneSidedReads === undefined ? {} : { oneSidedReads }),
    // No load gate unless a test sets one: a busy test runner must not make counts vary.
    oneSidedMaxLoad: 1,
    ...(more as { oneSidedReaders?: number }),
  });

let rdma: PsClient;
let off: PsClient;
let tcp: PsClient;

beforeAll(async () => {
  for (let i = 0; i < ids.length; i++) await startShard(i);
  [rdma, off, tcp] = await Promise.all([connect('rdma'), connect('rdma', false), connect('tcp')]);
});

afterAll(async () => {
  await Promise.allSettled([rdma, off, tcp].map((c) => c?.close()));
  await Promise.allSettled(services.map((s) => s?.close()));
  for (const t of serverRdma) await t.close();
});

const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));
const keysOf = (n: number, salt: bigint) =>
  BigUint64Array.from(
    { length: n },
    (_, i) => (BigInt(i) * 0x9e3779b97f4a7c15n + salt) % 2n ** 64n,
  );

async function pullAll(c: PsClient, table: string, keys: BigUint64Array): Promise<Float32Array> {
  const out = new Float32Array(keys.length * (c.tables.get(table) as number));
  await c.pullInto(table, keys, out);
  return out;
}

describe('one-sided pulls of oneSidedRead tables', () => {
  it('RDMA one-sided, RDMA two-sided (off) and TCP give the same rows, f32 and f16, present and absent keys', async () => {
    const present = keysOf(300, 11n);
    for (const [table, dim] of [
      ['emb', 8],
      ['half', 6],
    ] as const) {
      const grads = Float32Array.from({ length: present.length * dim }, (_, i) => Math.cos(i) / 4);
      await tcp.push(table, present, grads);
      // Half of these were pushed, half never: absent keys get the table's init row.
      const keys = BigUint64Array.from([...present.subarray(0, 150), ...keysOf(150, 99_999n)]);
      const before = rdma.stats().oneSided.keys;
      const [a, b, c] = await Promise.all([
        pullAll(rdma, table, keys),
        pullAll(off, table, keys),
        pullAll(tcp, table, keys),
      ]);
      expect(bits(a)).toEqual(bits(c));
      expect(bits(b)).toEqual(bits(c));
      expect(rdma.stats().oneSided.keys - before).toBe(keys.length);
    }
    expect(off.stats().oneSided.keys).toBe(0);
    expect(tcp.stats().oneSided.keys).toBe(0);
    // A table that is not readable is pulled two-sided, as before.
    const k = keysOf(20, 3n);
    expect(bits(await pullAll(rdma, 'plain', k))).toEqual(bits(await pullAll(tcp, 'plain', k)));
  });

  it('a repeated pull reads its keys through slot hints: fewer READs a key, the same rows', async () => {
    const keys = keysOf(256, 1234n);
    await tcp.push('emb', keys, new Float32Array(keys.length * 8).fill(0.5));
    const [hinting, plain] = await Promise.all([
      connect('rdma'),
      connect('rdma', undefined, { oneSidedSlotHints: 0 }),
    ]);
    try {
      const ref = bits(await pullAll(tcp, 'emb', keys));
      const readsPerKey = async (c: PsClient) => {
        const before = c.stats().oneSided;
        expect(bits(await pullAll(c, 'emb', keys))).toEqual(ref);
        const after = c.stats().oneSided;
        expect(after.keys - before.keys).toBe(keys.length);
        return {
          reads: (after.reads - before.reads) / keys.length,
          hinted: after.hinted - before.hinted,
        };
      };
      const first = await readsPerKey(hinting);
      expect(first.hinted).toBe(0);
      const again = await readsPerKey(hinting);
      // Every key hinted: meta, row, meta (+ two epoch reads a segment) instead of a window too.
      expect(again.hinted).toBe(keys.length);
      expect(again.reads).toBeLessThan(first.reads);
      expect(again.reads).toBeLessThan(3.1);
      await readsPerKey(plain);
      const off = await readsPerKey(plain);
      expect(off.hinted).toBe(0);
      expect(off.reads).toBeGreaterThanOrEqual(4);
    } finally {
      await Promise.all([hinting.close(), plain.close()]);
    }
  });

  it('oneSidedReaders bounds the reads in flight (1: concurrent segments go two-sided); bad values (of every one-sided option) are refused', async () => {
    for (const bad of [
      { oneSidedReaders: 0 },
      { oneSidedReaders: 65 },
      { oneSidedReaders: 1.5 },
      { oneSidedSlotHints: -1 },
      { oneSidedSlotHints: 2 ** 22 + 1 },
      { oneSidedSlotHints: '8' },
      { oneSidedMaxLoad: -0.1 },
      { oneSidedMaxLoad: 1.5 },
      { oneSidedMaxLoad: Number.NaN },
      { oneSidedMaxLoad: '0.5' },
      { oneSidedBusyMaxKeys: -1 },
      { oneSidedBusyMaxKeys: 1025 },
      { oneSidedBusyMaxKeys: 1.5 },
      { oneSidedBusyMaxKeys: '8' },
    ])
      await expect(connect('rdma', undefined, bad)).rejects.toMatchObject({
        code: 'ERR_PS_CLIENT_INVALID_ARG',
      });
    const keys = keysOf(64, 31n);
    const c = await connect('rdma', undefined, { oneSidedReaders: 1 });
    try {
      const ref = bits(await pullAll(tcp, 'emb', keys));
      await pullAll(c, 'emb', keys); // headers read, one reader per shard in place
      const before = c.stats().oneSided;
      const got = await Promise.all(Array.from({ length: 4 }, () => pullAll(c, 'emb', keys)));
      for (const g of got) expect(bits(g)).toEqual(ref);
      const after = c.stats().oneSided;
      expect(after.fallbackKeys).toBeGreaterThan(before.fallbackKeys);
      expect(after.keys).toBeGreaterThan(before.keys);
    } finally {
      await c.close();
    }
  });

  it('oneSidedMaxLoad 0 (a gate that never opens) with oneSidedBusyMaxKeys 0 sends every segment two-sided, counted as gated, same rows', async () => {
    const keys = keysOf(64, 4242n);
    const c = await connect('rdma', undefined, { oneSidedMaxLoad: 0, oneSidedBusyMaxKeys: 0 });
    try {
      const got = await Promise.all([pullAll(c, 'emb', keys), pullAll(c, 'half', keys)]);
      expect(bits(got[0] as Float32Array)).toEqual(bits(await pullAll(tcp, 'emb', keys)));
      expect(bits(got[1] as Float32Array)).toEqual(bits(await pullAll(tcp, 'half', keys)));
      const s = c.stats().oneSided;
      expect(s.keys).toBe(0);
      expect(s.reads).toBe(0);
      expect(s.gated).toBeGreaterThan(0);
      expect(s.gated).toBe(s.fallbacks);
      expect(s.fallbackKeys).toBe(2 * keys.length);
    } finally {
      await c.close();
    }
    // The default (0.25) is accepted, and an open gate counts nothing.
    const d = await connect('rdma', undefined, { oneSidedMaxLoad: undefined });
    await d.close();
    expect(rdma.stats().oneSided.gated).toBe(0);
  });

  it('while the gate is shut, segments of at most oneSidedBusyMaxKeys keys still go one-sided and larger ones two-sided, same rows', async () => {
    const c = await connect('rdma', undefined, { oneSidedMaxLoad: 0, oneSidedBusyMaxKeys: 1 });
    try {
      // One key: a segment of exactly the cap, READ one-sidedly.
      const one = keysOf(1, 515n);
      expect(bits(await pullAll(c, 'emb', one))).toEqual(bits(await pullAll(tcp, 'emb', one)));
      const s1 = c.stats().oneSided;
      expect(s1.keys).toBe(1);
      expect(s1.gated).toBe(0);
      // Three keys over two shards: some shard's segment has ≥ 2 (over the cap), pulled
      // two-sided and counted; a segment of one (if any) is still READ.
      const three = keysOf(3, 616n);
      expect(bits(await pullAll(c, 'emb', three))).toEqual(bits(await pullAll(tcp, 'emb', three)));
      const s2 = c.stats().oneSided;
      expect(s2.gated).toBeGreaterThanOrEqual(1);
      expect(s2.fallbackKeys).toBeGreaterThanOrEqual(2);
      expect(s2.keys - s1.keys + s2.fallbackKeys).toBe(three.length);
    } finally {
      await c.close();
    }
    // The default cap (32): segments of ≈ 20 keys are READ, segments of ≈ 100 are not.
    const d = await connect('rdma', undefined, { oneSidedMaxLoad: 0 });
    try {
      const small = keysOf(40, 717n);
      expect(bits(await pullAll(d, 'emb', small))).toEqual(bits(await pullAll(tcp, 'emb', small)));
      expect(d.stats().oneSided).toMatchObject({ keys: small.length, gated: 0 });
      const large = keysOf(200, 818n);
      expect(bits(await pullAll(d, 'emb', large))).toEqual(bits(await pullAll(tcp, 'emb', large)));
      expect(d.stats().oneSided).toMatchObject({
        keys: small.length,
        gated: ids.length,
        fallbackKeys: large.length,
      });
    } finally {
      await d.close();
    }
  });

  it('a pull whose deadline leaves no time to read one-sidedly goes two-sided: no error counted, no reader lost', async () => {
    const keys = keysOf(40, 77n);
    await pullAll(rdma, 'emb', keys); // header and a reader in place
    const before = rdma.stats().oneSided;
    // 1 ms: the one-sided half of it is spent before a READ is posted.
    const out = new Float32Array(keys.length * 8);
    await Promise.allSettled([rdma.pullInto('emb', keys, out, { deadlineMs: 1 })]);
    const mid = rdma.stats().oneSided;
    expect(mid.keys).toBe(before.keys);
    expect(mid.errors).toBe(before.errors);
    // The reader went back: the next pull reads one-sidedly again, with the right rows.
    expect(bits(await pullAll(rdma, 'emb', keys))).toEqual(bits(await pullAll(tcp, 'emb', keys)));
    expect(rdma.stats().oneSided.keys - mid.keys).toBe(keys.length);
  });

  it('pull() (rows held in registered memory) matches pullInto, duplicates included', async () => {
    const keys = BigUint64Array.from([5n, 7n, 5n, 2n ** 64n - 1n, 7n]);
    const rows = await rdma.pull('emb', keys);
    const got = new Float32Array(keys.length * 8);
    rows.copyInto(got);
    rows.release();
    expect(bits(got)).toEqual(bits(await pullAll(tcp, 'emb', keys)));
  });

  it('rows read while pushes change them are whole rows of some applied state, never torn', async () => {
    const keys = keysOf(64, 77n);
    const dim = 8;
    // Every push adds the same value to every float of a row: a read row's floats agree.
    const ones = new Float32Array(keys.length * dim).fill(1);
    const pushes = (async () => {
      for (let i = 0; i < 40; i++) await tcp.push('emb', keys, ones);
    })();
    const base = await pullAll(off, 'emb', keys);
    let reads = 0;
    let done = false;
    void pushes.then(() => {
      done = true;
    });
    while (!done || reads < 5) {
      // A one-sided pull can complete without an event-loop turn (soft copies inside the
      // post): yield, or this loop would starve the pushes' I/O.
      await new Promise(setImmediate);
      const r = await pullAll(rdma, 'emb', keys);
      for (let i = 0; i < keys.length; i++) {
        // adagrad moves every float of a row by the same step from equal gradients: a row
        // read half before and half after a push would show two different deltas (a step is
        // ≥ 0.1/√40 ≈ 0.016; rounding differences are < 1e-5).
        const row = r.subarray(i * dim, i * dim + dim);
        const d0 = (row[0] as number) - (base[i * dim] as number);
        for (let j = 1; j < dim; j++)
          expect(Math.abs((row[j] as number) - (base[i * dim + j] as number) - d0)).toBeLessThan(
            1e-4,
          );
      }
      reads++;
    }
    await pushes;
    expect(bits(await pullAll(rdma, 'emb', keys))).toEqual(bits(await pullAll(tcp, 'emb', keys)));
  });

  it('rows that never settle (seqlock forever odd) fall back two-sided: right rows, bounded', async () => {
    const s = services[0] as PsService;
    const view = s.store.storeView('emb');
    if (view === null) throw new Error('emb is not readable');
    const keys = keysOf(100, 4242n);
    await tcp.push('emb', keys, new Float32Array(keys.length * 8).fill(0.25));
    const l = view.layout;
    const seqs = new Uint32Array(
      view.bytes.buffer,
      view.bytes.byteOffset + l.metaOffset,
      l.slotCount * 4,
    );
    const saved = seqs.slice();
    try {
      // As if every row were being written: the reader retries, then gives the keys back.
      for (let i = 0; i < l.slotCount; i++) seqs[4 * i] = (seqs[4 * i] as number) | 1;
      const before = rdma.stats().oneSided;
      const got = await pullAll(rdma, 'emb', keys);
      expect(rdma.stats().oneSided.fallbacks).toBeGreaterThan(before.fallbacks);
      expect(bits(got)).toEqual(bits(await pullAll(tcp, 'emb', keys)));
    } finally {
      seqs.set(saved);
    }
  });

  it('a lying header (bad magic) is refused: two-sided on that connection, right rows', async () => {
    const s = services[1] as PsService;
    const view = s.store.storeView('half');
    if (view === null) throw new Error('half is not readable');
    const head = new DataView(view.bytes.buffer, view.bytes.byteOffset, STORE_VIEW.HEADER_BYTES);
    const c = await connect('rdma');
    try {
      head.setUint32(STORE_VIEW_HEADER.MAGIC, 0xdeadbeef, true);
      const keys = BigUint64Array.from(
        Array.from({ length: 400 }, (_, i) => BigInt(i)).filter((k) => c.shardOf(k) === 'b'),
      );
      const got = await pullAll(c, 'half', keys);
      const st = c.stats().oneSided;
      expect(st.errors).toBeGreaterThan(0);
      expect(st.keys).toBe(0);
      expect(bits(got)).toEqual(bits(await pullAll(tcp, 'half', keys)));
    } finally {
      head.setUint32(STORE_VIEW_HEADER.MAGIC, STORE_VIEW.MAGIC, true);
      await c.close();
    }
  });

  it('after a shard restart the old descriptor is refused, a new one fetched, and rows are right', async () => {
    const keys = keysOf(200, 5n);
    await tcp.push('emb', keys, new Float32Array(keys.length * 8).fill(0.25));
    await pullAll(rdma, 'emb', keys);
    // Read again through slot hints: hints of the old process that must not outlive it.
    const hinted = rdma.stats().oneSided.hinted;
    await pullAll(rdma, 'emb', keys);
    expect(rdma.stats().oneSided.hinted).toBeGreaterThan(hinted);
    const old = services[0] as PsService;
    const p = ports[0] as { rdma: number; tcp: number };
    await old.close();
    // A new process would be a new transport: new incarnation, new region.
    await serverRdma[0]?.close();
    serverRdma[0] = new RdmaTransport();
    const fresh = await startShard(0, p);
    const grads = new Float32Array(keys.length * 8).fill(0.5);
    await tcp.push('emb', keys, grads);
    const before = rdma.stats().oneSided;
    // The first pulls after the restart may go two-sided (refresh running); never wrong.
    const ref = await pullAll(tcp, 'emb', keys);
    for (let i = 0; i < 5; i++) expect(bits(await pullAll(rdma, 'emb', keys))).toEqual(bits(ref));
    const after = rdma.stats().oneSided;
    expect(after.refreshes).toBeGreaterThan(before.refreshes);
    expect(after.keys).toBeGreaterThan(before.keys);
    expect(fresh.store.storeView('emb')).not.toBeNull();
  });
});

// One-sided reads (issue 15, step 1): a process exposes a read region, its peer reads rows of
// it with RDMA READs (connection.read + ReadList) without waking it. Two transports of this
// process on their own soft devices (rdmaPair); the server side owns the regions.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { type Device, openDevice, type QueuePair } from '@rdmajs/verbs';
import { injectFault } from '@rdmajs/verbs/testing';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  decodeReadDescriptor,
  encodeReadDescriptor,
  type MuxError,
  RdmaTransport,
  READ_DESCRIPTOR_BYTES,
  type ReadDescriptor,
  ReadList,
} from '../src/index.js';
import { rdmaPair } from './support/rdmaPair.js';
import { thrownCode as code } from './support/thrownCode.js';

const SECRET = 'one-sided read test secret, 32+ bytes';
const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A region of `bytes` on the server side, byte i = (i * 7 + seed) & 255, its descriptor on the wire. */
async function setup(bytes = 64 * 1024, options = {}) {
  const pair = await rdmaPair(cleanups, { secret: SECRET, options });
  const region = pair.server.allocReadRegion(bytes);
  cleanups.push(() => region.close());
  for (let i = 0; i < bytes; i++) (region.bytes as Uint8Array)[i] = (i * 7 + 3) & 255;
  const wire = new Uint8Array(READ_DESCRIPTOR_BYTES);
  encodeReadDescriptor(region.descriptor, wire);
  // What a client would get from the shard (in a reply): decoded as untrusted bytes.
  const descriptor = decodeReadDescriptor(wire);
  return { ...pair, region, descriptor };
}

const expected = (off: number, n: number) =>
  Uint8Array.from({ length: n }, (_, k) => ((off + k) * 7 + 3) & 255);

describe('one-sided reads over RDMA', () => {
  it('read_lands_the_exact_bytes_of_every_entry_in_its_destination', async () => {
    const { conn, descriptor } = await setup();
    expect(conn.supportsRead).toBe(true);
    const dst = conn.allocator.alloc(4096);
    const other = conn.allocator.alloc(512).slice(100, 200);
    const list = new ReadList(8);
    // A key's meta, row and meta again, as a seqlock fetch reads them; one into a slice.
    list.add(16, 16, dst, 0).add(1024, 256, dst, 16).add(16, 16, dst, 272).add(60_000, 200, other);
    await conn.read(descriptor, list);
    expect(dst.bytes.subarray(0, 16)).toEqual(expected(16, 16));
    expect(dst.bytes.subarray(16, 272)).toEqual(expected(1024, 256));
    expect(dst.bytes.subarray(272, 288)).toEqual(expected(16, 16));
    expect(other.bytes).toEqual(expected(60_000, 200));
    expect(list.busy).toBe(false);
    expect(conn.stats().reads).toBe(1);
    expect(conn.stats().readItems).toBe(4);
  });

  it('read_of_many_entries_and_of_more_than_a_send_queue_lands_every_one', async () => {
    const { conn, descriptor, region } = await setup(256 * 1024);
    // 1 500 entries: three send queues' worth (512 WRs per QP), posted as completions free it.
    for (const n of [64, 1500]) {
      const list = new ReadList(n);
      const dst = conn.allocator.alloc(n * 100);
      dst.bytes.fill(0);
      for (let i = 0; i < n; i++)
        list.add((i * 163) % (region.bytes.length - 100), 100, dst, i * 100);
      await conn.read(descriptor, list);
      for (let i = 0; i < n; i += 37) {
        const off = (i * 163) % (region.bytes.length - 100);
        expect(dst.bytes.subarray(i * 100, i * 100 + 100)).toEqual(expected(off, 100));
      }
      const last = ((n - 1) * 163) % (region.bytes.length - 100);
      expect(dst.bytes.subarray((n - 1) * 100, n * 100)).toEqual(expected(last, 100));
      dst.release();
    }
    expect(conn.stats().outstandingWrs).toBe(0);
  });

  it('reads_see_what_the_owner_wrote_last_without_a_message_to_it', async () => {
    const { conn, descriptor, region, serverConns } = await setup(4096);
    const dst = conn.allocator.alloc(8);
    const list = new ReadList(1).add(100, 8, dst);
    const before = serverConns[0]?.stats().framesIn;
    for (let v = 1; v <= 5; v++) {
      region.bytes.fill(v, 100, 108);
      await conn.read(descriptor, list);
      expect([...dst.bytes.subarray(0, 8)]).toEqual(Array(8).fill(v));
    }
    // One-sided: the owner received no frame for them.
    expect(serverConns[0]?.stats().framesIn).toBe(before);
  });

  it('out_of_range_and_foreign_destinations_are_refused_before_posting_and_the_connection_stays_usable', async () => {
    const { conn, descriptor, client } = await setup(4096);
    const dst = conn.allocator.alloc(64);
    // Past the region's end (also by one byte), far past it.
    expect(code(() => conn.read(descriptor, new ReadList(1).add(4090, 7, dst)))).toBe(
      'ERR_MUX_READ_RANGE',
    );
    expect(code(() => conn.read(descriptor, new ReadList(1).add(2 ** 40, 1, dst)))).toBe(
      'ERR_MUX_READ_RANGE',
    );
    // Past the destination: refused by add().
    expect(code(() => new ReadList(1).add(0, 65, dst))).toBe('ERR_MUX_READ_RANGE');
    expect(code(() => new ReadList(1).add(0, 10, dst, 60))).toBe('ERR_MUX_READ_RANGE');
    // A block of another transport (another protection domain): its lkey is not ours.
    const stranger = new RdmaTransport();
    cleanups.push(() => stranger.close());
    const foreign = stranger.allocator.alloc(64);
    expect(code(() => conn.read(descriptor, new ReadList(1).add(0, 8, foreign)))).toBe(
      'ERR_MUX_READ_RANGE',
    );
    // A destination released after add().
    const gone = client.allocator.alloc(64);
    const list = new ReadList(1).add(0, 8, gone);
    gone.release();
    expect(code(() => conn.read(descriptor, list))).toBe('ERR_MUX_READ_RANGE');
    // Bad numbers.
    expect(code(() => new ReadList(1).add(-1, 8, dst))).toBe('ERR_MUX_INVALID_ARG');
    expect(code(() => new ReadList(1).add(0, 0, dst))).toBe('ERR_MUX_INVALID_ARG');
    expect(code(() => new ReadList(0))).toBe('ERR_MUX_INVALID_ARG');
    expect(code(() => new ReadList(1).add(0, 1, dst).add(0, 1, dst))).toBe('ERR_MUX_INVALID_ARG');
    expect(code(() => conn.read(descriptor, [] as unknown as ReadList))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
    expect(conn.stats().reads).toBe(0); // nothing was posted
    // Still usable: a good read (a block of the transport allocator too), and a channel.
    const fromTransport = client.allocator.alloc(8);
    await conn.read(descriptor, new ReadList(2).add(4088, 8, dst).add(0, 8, fromTransport));
    expect(dst.bytes.subarray(0, 8)).toEqual(expected(4088, 8));
    expect(fromTransport.bytes).toEqual(expected(0, 8));
    const ch = conn.openChannel('after');
    await ch.send(new Uint8Array([1, 2, 3]));
    const echo = await ch.receive({ timeoutMs: 30_000 });
    expect([...echo.bytes]).toEqual([1, 2, 3]);
    echo.release();
    expect(conn.state).toBe('open');
  });

  it('add_batch_lands_as_the_same_adds_and_refuses_what_add_refuses', async () => {
    const { conn, descriptor, client } = await setup(4096);
    const scratch = conn.allocator.alloc(256);
    const rows = conn.allocator.alloc(1024).slice(64, 512); // 512 bytes at 64
    // Entries alternating between two destinations, as a fetch's meta, row, meta.
    const remote = Float64Array.of(0, 100, 16, 32, 900, 48, 4088);
    const length = Uint32Array.of(16, 256, 16, 16, 128, 16, 8);
    const local = Float64Array.of(0, 0, 16, 32, 256, 48, 64);
    const which = Uint8Array.of(0, 1, 0, 0, 1, 0, 0);
    const list = new ReadList(16).add(2000, 8, scratch, 200);
    list.addBatch(7, remote, length, local, which, [scratch, rows]);
    expect(list.length).toBe(8);
    await conn.read(descriptor, list);
    expect(scratch.bytes.subarray(200, 208)).toEqual(expected(2000, 8));
    for (let j = 0; j < 7; j++) {
      const dst = which[j] === 0 ? scratch.bytes : rows.bytes;
      const at = local[j] as number;
      expect(dst.subarray(at, at + (length[j] as number))).toEqual(
        expected(remote[j] as number, length[j] as number),
      );
    }
    const one = (r: number, n: number, l: number, k: number, into: unknown[] = [scratch, rows]) =>
      code(() =>
        new ReadList(4).addBatch(
          1,
          [r],
          [n],
          [l],
          [k],
          into as Parameters<ReadList['addBatch']>[5],
        ),
      );
    // Past a destination (the slice's own end, not its block's), bad numbers, a bad index.
    expect(one(0, 16, 250, 0)).toBe('ERR_MUX_READ_RANGE');
    expect(one(0, 64, 480, 1)).toBe('ERR_MUX_READ_RANGE');
    expect(one(-1, 8, 0, 0)).toBe('ERR_MUX_INVALID_ARG');
    expect(one(0, 0, 0, 0)).toBe('ERR_MUX_INVALID_ARG');
    expect(one(0, 8, 0.5, 0)).toBe('ERR_MUX_INVALID_ARG');
    expect(one(0, 8, 0, 2)).toBe('ERR_MUX_INVALID_ARG');
    expect(one(0, 8, 0, 0, [{}])).toBe('ERR_MUX_INVALID_ARG');
    expect(code(() => new ReadList(4).addBatch(2, [0], [8], [0], [0], [scratch]))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
    expect(code(() => new ReadList(1).addBatch(2, [0, 0], [8, 8], [0, 8], [0, 0], [scratch]))).toBe(
      'ERR_MUX_INVALID_ARG',
    );
    // A released destination is refused at once; one released after the batch, at read();
    // the remote range is still checked at read(), entry by entry.
    const gone = client.allocator.alloc(64);
    gone.release();
    expect(one(0, 8, 0, 0, [gone])).toBe('ERR_MUX_READ_RANGE');
    const later = client.allocator.alloc(64);
    const stale = new ReadList(4).addBatch(
      3,
      [0, 8, 16],
      [8, 8, 8],
      [0, 0, 8],
      [0, 1, 0],
      [scratch, later],
    );
    later.release();
    expect(code(() => conn.read(descriptor, stale))).toBe('ERR_MUX_READ_RANGE');
    const far = new ReadList(4).addBatch(2, [0, 4090], [8, 8], [0, 8], [0, 0], [scratch]);
    expect(code(() => conn.read(descriptor, far))).toBe('ERR_MUX_READ_RANGE');
    // A foreign block behind a checked one, in turn with it: still refused at read().
    const stranger = new RdmaTransport();
    cleanups.push(() => stranger.close());
    const foreign = stranger.allocator.alloc(64);
    const mixed = new ReadList(4).addBatch(
      3,
      [0, 8, 16],
      [8, 8, 8],
      [0, 0, 8],
      [0, 1, 0],
      [scratch, foreign],
    );
    expect(code(() => conn.read(descriptor, mixed))).toBe('ERR_MUX_READ_RANGE');
    expect(conn.stats().reads).toBe(1); // only the good list was posted
  });

  it('a_descriptor_of_another_incarnation_or_another_peer_is_refused_as_stale', async () => {
    const { conn, descriptor } = await setup(4096);
    const dst = conn.allocator.alloc(8);
    const list = new ReadList(1).add(0, 8, dst);
    const restarted: ReadDescriptor = { ...descriptor, incarnation: descriptor.incarnation ^ 1n };
    expect(code(() => conn.read(restarted, list))).toBe('ERR_MUX_STALE_DESCRIPTOR');
    // A region of another process (transport) is never read through this connection.
    const elsewhere = new RdmaTransport();
    cleanups.push(() => elsewhere.close());
    const region = elsewhere.allocReadRegion(4096);
    expect(code(() => conn.read(region.descriptor, list))).toBe('ERR_MUX_STALE_DESCRIPTOR');
    expect(conn.stats().reads).toBe(0);
    await conn.read(descriptor, list);
    expect(dst.bytes).toEqual(expected(0, 8));
  });

  it('reading_a_region_its_owner_closed_fails_the_reads_with_a_typed_error_and_the_channels_go_on', async () => {
    const { conn, descriptor, region, serverConns, server, client } = await setup(4096);
    const dst = conn.allocator.alloc(64);
    const list = new ReadList(2).add(0, 32, dst).add(32, 32, dst, 32);
    await conn.read(descriptor, list);
    const ch = conn.openChannel('pending');
    const pending = ch.receive({ timeoutMs: 60_000 });
    const told: Error[] = [];
    conn.on('readsFailed', (e) => told.push(e));
    expect(conn.stats().readQpFailures).toBe(0);
    region.close();
    region.close(); // idempotent
    const err = (await conn
      .read(descriptor, list, { timeoutMs: 30_000 })
      .catch((e) => e)) as MuxError;
    expect(err.code).toBe('ERR_MUX_READ_FAILED');
    expect(err.retryable).toBe(true);
    expect((err.cause as { status?: string }).status).toBe('REM_ACCESS_ERR');
    expect(list.busy).toBe(false);
    // Observable without a read: the flag, the stat, the event (rpc-recovery can reconnect).
    expect(conn.supportsRead).toBe(false);
    expect(conn.stats().readQpFailures).toBe(1);
    expect(told).toHaveLength(1);
    // Later reads fail at once (the read QP is in error), even of a live region.
    const live = server.allocReadRegion(64);
    cleanups.push(() => live.close());
    expect(code(() => conn.read(live.descriptor, list))).toBe('ERR_MUX_READ_FAILED');
    expect(conn.stats().outstandingWrs).toBe(0);
    // The channels live on other QPs: the pending receive gets its echo, both sides stay open.
    await ch.send(new Uint8Array([9, 8, 7]));
    const echo = await pending;
    expect([...echo.bytes]).toEqual([9, 8, 7]);
    echo.release();
    expect(conn.state).toBe('open');
    expect(serverConns[0]?.state).toBe('open');
    // The owner's reads over the same QP pair fail too (its QP failed with ours), typed.
    const owner = serverConns[0];
    if (owner === undefined) throw new Error('no server connection');
    const mine = client.allocReadRegion(64);
    cleanups.push(() => mine.close());
    const into = owner.allocator.alloc(8);
    const failed = (await Promise.resolve()
      .then(() =>
        owner.read(mine.descriptor, new ReadList(1).add(0, 8, into), { timeoutMs: 30_000 }),
      )
      .catch((e) => e)) as MuxError;
    expect(failed.code).toBe('ERR_MUX_READ_FAILED');
    expect(owner.state).toBe('open');
  });

  it('a_read_region_is_remote_read_only_zeroed_and_counted_in_the_registration_limit', async () => {
    const t = new RdmaTransport({ maxRegisteredBytes: 16 * 1024 * 1024 });
    cleanups.push(() => t.close());
    const r = t.allocReadRegion(1000);
    expect(r.descriptor.length).toBe(1000);
    expect(r.bytes.length).toBe(1000);
    expect(r.block.access).toBe('remote-read');
    expect(r.bytes.every((b) => b === 0)).toBe(true);
    expect(r.descriptor.incarnation).toBe(t.incarnation);
    expect(code(() => t.allocReadRegion(64 * 1024 * 1024))).toBe('ERR_ALLOC_LIMIT');
    expect(code(() => t.allocReadRegion(0))).toBe('ERR_MUX_INVALID_ARG');
    r.close();
    expect(r.closed).toBe(true);
    expect(code(() => r.block)).toBe('ERR_MUX_CLOSED');
    // Closing the transport closes what is left.
    const left = t.allocReadRegion(10);
    t.close();
    expect(left.closed).toBe(true);
  });

  /** A soft device that records the QPs made on it (a connection's last one is its read QP). */
  function recordingDevice(qps: QueuePair[]): Device {
    const dev = openDevice({ provider: 'soft' });
    const allocPd = dev.allocPd.bind(dev);
    dev.allocPd = ((...args: Parameters<Device['allocPd']>) => {
      const pd = allocPd(...args);
      const createQp = pd.createQp.bind(pd);
      pd.createQp = ((...a: Parameters<typeof createQp>) => {
        const qp = createQp(...a);
        qps.push(qp);
        return qp;
      }) as typeof pd.createQp;
      return pd;
    }) as Device['allocPd'];
    return dev;
  }

  /** A pair whose client READs wait 300 ms in the send queue, and a 4 KiB region of 0x5a. */
  async function delayedReads() {
    const qps: QueuePair[] = [];
    const dev = recordingDevice(qps);
    const serverDev = openDevice({ provider: 'soft' });
    cleanups.push(() => {
      dev.close();
      serverDev.close();
    });
    const pair = await rdmaPair(cleanups, {
      secret: SECRET,
      options: { device: dev },
      serverOptions: { device: serverDev },
    });
    const region = pair.server.allocReadRegion(4096);
    cleanups.push(() => region.close());
    region.bytes.fill(0x5a);
    injectFault(qps.at(-1) as QueuePair, { type: 'delay', ms: 300 });
    return { ...pair, region };
  }

  for (const how of ['deadline', 'abort'] as const) {
    it(`a_read_abandoned_by_${how}_rejects_only_once_its_READs_cannot_land_and_reads_stop`, async () => {
      const { conn, region, serverConns } = await delayedReads();
      // The READ stays in the send queue for 300 ms: the read() gives up long before.
      const dst = conn.allocator.alloc(64);
      dst.bytes.fill(0);
      const list = new ReadList(1).add(0, 64, dst);
      const ac = new AbortController();
      const options =
        how === 'deadline' ? { timeoutMs: 20 } : { signal: ac.signal, timeoutMs: 60_000 };
      const told: Error[] = [];
      conn.on('readsFailed', (e) => told.push(e));
      const pending = conn.read(region.descriptor, list, options).catch((e) => e as MuxError);
      if (how === 'abort') setTimeout(() => ac.abort(new Error('caller gave up')), 20);
      const err = await pending;
      expect(err?.code).toBe(how === 'deadline' ? 'ERR_MUX_DEADLINE' : 'ERR_MUX_ABORTED');
      expect(list.busy).toBe(false);
      expect(conn.stats().outstandingWrs).toBe(0);
      // Cancelled, not left posted: well past the delay, the destination was never written.
      await new Promise((r) => setTimeout(r, 600));
      expect(dst.bytes.every((b) => b === 0)).toBe(true);
      // Reads on this connection behave as after a refused READ; the channels go on.
      expect(conn.stats().readQpFailures).toBe(1);
      expect(conn.supportsRead).toBe(false);
      expect(told.map((e) => (e as MuxError).code)).toEqual(['ERR_MUX_READ_FAILED']);
      expect(code(() => conn.read(region.descriptor, list))).toBe('ERR_MUX_READ_FAILED');
      const ch = conn.openChannel('after');
      const echo = ch.receive({ timeoutMs: 60_000 });
      await ch.send(new Uint8Array([4, 2]));
      const m = await echo;
      expect([...m.bytes]).toEqual([4, 2]);
      m.release();
      expect(conn.state).toBe('open');
      expect(serverConns[0]?.state).toBe('open');
    });
  }

  it('a_read_deadline_is_monotonic_a_wall_clock_step_does_not_expire_it', async () => {
    const { conn, region } = await delayedReads();
    // The READ waits 300 ms in the send queue; meanwhile the wall clock jumps an hour ahead.
    const dst = conn.allocator.alloc(64);
    const list = new ReadList(1).add(0, 64, dst);
    const pending = conn.read(region.descriptor, list, { timeoutMs: 60_000 });
    const now = Date.now;
    const step = now() + 3_600_000;
    Date.now = () => step;
    try {
      await pending;
    } finally {
      Date.now = now;
    }
    expect(dst.bytes.every((b) => b === 0x5a)).toBe(true);
    expect(conn.stats().readQpFailures).toBe(0);
  });

  it('a_busy_list_cannot_change_and_an_aborted_read_is_not_posted', async () => {
    const { conn, descriptor } = await setup(4096);
    const dst = conn.allocator.alloc(8);
    const list = new ReadList(1).add(0, 8, dst);
    const aborted = AbortSignal.abort(new Error('no'));
    expect(code(() => conn.read(descriptor, list, { signal: aborted }))).toBe('ERR_MUX_ABORTED');
    expect(list.busy).toBe(false);
    expect(conn.stats().reads).toBe(0);
    const empty = new ReadList(4);
    await conn.read(descriptor, empty); // nothing to read: resolves at once
    expect(conn.stats().reads).toBe(0);
  });

  it('many_reads_do_not_grow_the_heap', async () => {
    const { conn, descriptor } = await setup(64 * 1024);
    const dst = conn.allocator.alloc(16 * 288);
    const list = new ReadList(48);
    for (let k = 0; k < 16; k++) {
      list.add(k * 512, 16, dst, k * 288).add(k * 512 + 16, 256, dst, k * 288 + 16);
      list.add(k * 512, 16, dst, k * 288 + 272);
    }
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const run = async (n: number) => {
      for (let i = 0; i < n; i++) await conn.read(descriptor, list);
    };
    await run(2_000);
    gc();
    const before = process.memoryUsage().heapUsed;
    await run(20_000);
    gc();
    const grown = process.memoryUsage().heapUsed - before;
    // Nothing is kept per read: a record per read would be ≥ 20 000 × 100 B = 2 MB.
    expect(grown).toBeLessThan(1024 * 1024);
    expect(conn.stats().reads).toBe(22_000);
    expect(dst.bytes.subarray(288 * 15 + 16, 288 * 15 + 272)).toEqual(expected(15 * 512 + 16, 256));
  });
});

describe('read descriptors from a peer are untrusted', () => {
  const arbDescriptor = fc.record({
    incarnation: fc.bigInt({ min: 1n, max: (1n << 64n) - 1n }),
    addr: fc.integer({ min: 0, max: 2 ** 40 }),
    rkey: fc.integer({ min: 0, max: 0xffffffff }),
    length: fc.integer({ min: 1, max: 2 ** 40 }),
  });

  it('descriptors_round_trip_through_their_32_bytes', () => {
    fc.assert(
      fc.property(arbDescriptor, (d) => {
        const b = new Uint8Array(READ_DESCRIPTOR_BYTES + 3);
        expect(encodeReadDescriptor(d, b, 3)).toBe(READ_DESCRIPTOR_BYTES + 3);
        expect(decodeReadDescriptor(b, 3)).toEqual(d);
      }),
    );
  });

  it('decode_of_arbitrary_bytes_returns_a_valid_descriptor_or_a_protocol_error', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 40 }), fc.nat(40), (bytes, at) => {
        let d: ReadDescriptor;
        try {
          d = decodeReadDescriptor(bytes, at);
        } catch (err) {
          expect((err as MuxError).code).toBe('ERR_MUX_PROTOCOL');
          return;
        }
        expect(d.incarnation > 0n).toBe(true);
        expect(d.length).toBeGreaterThanOrEqual(1);
        expect(Number.isSafeInteger(d.addr + d.length)).toBe(true);
        const again = new Uint8Array(READ_DESCRIPTOR_BYTES);
        encodeReadDescriptor(d, again);
        expect(again).toEqual(bytes.subarray(at, at + READ_DESCRIPTOR_BYTES));
      }),
      { numRuns: 2_000 },
    );
  });

  it('decode_rejects_each_tampered_field', () => {
    const good = new Uint8Array(READ_DESCRIPTOR_BYTES);
    encodeReadDescriptor({ incarnation: 5n, addr: 4096, rkey: 9, length: 100 }, good);
    const tamper = (f: (v: DataView) => void) => {
      const b = Uint8Array.from(good);
      f(new DataView(b.buffer));
      return code(() => decodeReadDescriptor(b));
    };
    expect(tamper((v) => v.setUint16(0, 2))).toBe('ERR_MUX_PROTOCOL'); // version
    expect(tamper((v) => v.setUint16(2, 1))).toBe('ERR_MUX_PROTOCOL'); // flags
    expect(tamper((v) => v.setBigUint64(8, 1n << 60n))).toBe('ERR_MUX_PROTOCOL'); // addr
    expect(tamper((v) => v.setBigUint64(16, 0n))).toBe('ERR_MUX_PROTOCOL'); // length 0
    expect(tamper((v) => v.setBigUint64(16, 2n ** 53n - 100n))).toBe('ERR_MUX_PROTOCOL'); // addr + length
    expect(tamper((v) => v.setBigUint64(24, 0n))).toBe('ERR_MUX_PROTOCOL'); // incarnation
    expect(code(() => decodeReadDescriptor(good.subarray(0, 31)))).toBe('ERR_MUX_PROTOCOL');
    expect(code(() => decodeReadDescriptor(good, 1))).toBe('ERR_MUX_PROTOCOL');
    expect(decodeReadDescriptor(good)).toEqual({
      incarnation: 5n,
      addr: 4096,
      rkey: 9,
      length: 100,
    });
  });
});

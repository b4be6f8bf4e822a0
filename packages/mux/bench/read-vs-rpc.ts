// Measurement (not a test): a one-sided read() of N keys vs a two-sided request/reply on a
// channel of the same connection, the region's owner in another process (soft provider).
// Per key the read list has W READs: 3 = meta 16 B, row 256 B, meta again (a seqlock
// fetch); 2 = meta+row as one, then meta. The reply carries the same 288 B per key, copied
// by the owner from its region. Rounds interleave read and rpc; reports wall µs per call and
// client / server CPU µs per call (utime + stime from /proc, 10 ms ticks: use enough CALLS).
//   cd packages/mux && CALLS=5000 W=3 POLICY=event node --import tsx bench/read-vs-rpc.ts
import { readFileSync } from 'node:fs';
import {
  type Channel,
  decodeReadDescriptor,
  encodeReadDescriptor,
  RdmaTransport,
  READ_DESCRIPTOR_BYTES,
  ReadList,
} from '../src/index.js';
import { spawnServer } from './support/spawnServer.js';

const SECRET = 'read bench secret, 32 bytes or more!!';
const ROW = 288;
const REGION = 4096 * ROW;
const policy = (process.env.POLICY ?? 'event') as 'event' | 'adaptive';
const W = Number(process.env.W ?? 3);

if (process.argv[2] === 'server') {
  const t = new RdmaTransport({ pollPolicy: policy });
  const region = t.allocReadRegion(REGION);
  for (let i = 0; i < REGION; i++) region.bytes[i] = i & 255;
  const l = await t.listen({ secret: SECRET });
  l.on('connection', (conn) => {
    conn.on('channel', (ch: Channel) => {
      ch.listen(
        (m) => {
          // A request: u32 row indexes; the reply: each row's meta, row, meta (copied from the store).
          const n = m.length / 4;
          const dv = new DataView(m.bytes.buffer, m.bytes.byteOffset, m.length);
          if (n === 0) {
            const d = new Uint8Array(READ_DESCRIPTOR_BYTES);
            encodeReadDescriptor(region.descriptor, d);
            m.release();
            void ch.send(d);
            return;
          }
          const out = t.allocator.alloc(n * ROW);
          for (let k = 0; k < n; k++) {
            const off = dv.getUint32(k * 4) * ROW;
            out.bytes.set(region.bytes.subarray(off, off + ROW), k * ROW);
          }
          m.release();
          void ch.send(out, { transfer: true });
        },
        () => {},
      );
    });
  });
  process.stdout.write(`${l.port}\n`);
} else {
  const { child, port } = await spawnServer(process.argv[1] as string);
  const cpuOf = (pid: number) => {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(f[11]) + Number(f[12])) * 10_000; // µs (100 Hz ticks)
  };
  const t = new RdmaTransport({ pollPolicy: policy });
  const conn = await t.connect({ port, secret: SECRET });
  const ch = conn.openChannel('rpc');
  await ch.send(new Uint8Array(0));
  const dm = await ch.receive();
  const desc = decodeReadDescriptor(dm.bytes);
  dm.release();
  const results: Record<string, number[][]> = {};
  const CALLS = Number(process.env.CALLS ?? 2000);
  for (const n of [1, 16, 64]) {
    const dst = conn.allocator.alloc(n * ROW);
    const list = new ReadList(W * n);
    const req = conn.allocator.alloc(4 * n);
    const dv = new DataView(req.bytes.buffer, req.bytes.byteOffset, 4 * n);
    for (let k = 0; k < n; k++) {
      const row = (k * 997) % 4096;
      dv.setUint32(k * 4, row);
      const off = row * ROW;
      if (W === 3) list.add(off, 16, dst, k * ROW).add(off + 16, 256, dst, k * ROW + 16);
      else list.add(off, 272, dst, k * ROW);
      list.add(off, 16, dst, k * ROW + 272);
    }
    const read = async () => {
      await conn.read(desc, list);
    };
    const rpc = async () => {
      await ch.send(req);
      const r = await ch.receive();
      r.release();
    };
    for (let i = 0; i < 300; i++) {
      await read();
      await rpc();
    }
    for (let rep = 0; rep < 4; rep++) {
      for (const [name, f] of [
        ['read', read],
        ['rpc', rpc],
      ] as const) {
        const c0 = cpuOf(process.pid);
        const s0 = cpuOf(child.pid as number);
        const t0 = process.hrtime.bigint();
        for (let i = 0; i < CALLS; i++) await f();
        const us = Number(process.hrtime.bigint() - t0) / 1000 / CALLS;
        const cc = (cpuOf(process.pid) - c0) / CALLS;
        const sc = (cpuOf(child.pid as number) - s0) / CALLS;
        const key = `${name} N=${n}`;
        results[key] = [...(results[key] ?? []), [us, cc, sc]];
      }
    }
    // Check: the last read brought the right bytes.
    const off = (((n - 1) * 997) % 4096) * ROW;
    for (let j = 0; j < 16; j++)
      if (dst.bytes[(n - 1) * ROW + 16 + j] !== ((off + 16 + j) & 255))
        throw new Error('bad bytes');
  }
  const f = (a: number[]) => `${Math.min(...a).toFixed(1)}–${Math.max(...a).toFixed(1)}`;
  console.log(
    `W=${W} READs per key, policy ${policy}, ${CALLS} calls per round, 4 interleaved rounds: µs/call, client CPU µs/call, server CPU µs/call (min–max)`,
  );
  for (const [k, v] of Object.entries(results)) {
    const n = Number(k.split('=')[1]);
    console.log(
      `${k.padEnd(12)} wall ${f(v.map((x) => x[0] as number))}  per item ${f(v.map((x) => (x[0] as number) / n))}  clientCPU ${f(v.map((x) => x[1] as number))}  serverCPU ${f(v.map((x) => x[2] as number))}`,
    );
  }
  conn.destroy();
  t.close();
  child.kill();
}

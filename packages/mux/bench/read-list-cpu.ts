// Measurement (not a test): the client CPU one READ of a ReadList costs, all included, the
// region's owner in another process (soft provider: the requester's CPU does the copy).
// For each size, a list of N READs (scattered offsets, like a parameter-server fetch) is
// read() CALLS times; reported per READ: client CPU ns (process.cpuUsage, user + sys) of
//   fill  clear() + N × add()           (a fetch builds its list per call)
//   read  conn.read(list), list already filled (check, post, copy, completion, resolve)
// Rounds interleave the sizes, ROUNDS of them; the spread is min–max over rounds.
//   cd packages/mux && N=736 CALLS=400 ROUNDS=3 node --import tsx bench/read-list-cpu.ts
import {
  type Channel,
  decodeReadDescriptor,
  encodeReadDescriptor,
  RdmaTransport,
  READ_DESCRIPTOR_BYTES,
  ReadList,
} from '../src/index.js';
import { spawnServer } from './support/spawnServer.js';

const SECRET = 'read-list-cpu bench secret, 32 bytes or more';
const REGION = 1 << 20;
const N = Number(process.env.N ?? 736);
const CALLS = Number(process.env.CALLS ?? 400);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const SIZES = (process.env.SIZES ?? '16,64,256').split(',').map(Number);

if (process.argv[2] === 'server') {
  const t = new RdmaTransport();
  const region = t.allocReadRegion(REGION);
  for (let i = 0; i < REGION; i++) region.bytes[i] = i & 255;
  const l = await t.listen({ secret: SECRET });
  l.on('connection', (conn) => {
    conn.on('channel', (ch: Channel) => {
      ch.listen(
        (m) => {
          m.release();
          const d = new Uint8Array(READ_DESCRIPTOR_BYTES);
          encodeReadDescriptor(region.descriptor, d);
          void ch.send(d);
        },
        () => {},
      );
    });
  });
  process.stdout.write(`${l.port}\n`);
} else {
  const { child, port } = await spawnServer(process.argv[1] as string);
  const t = new RdmaTransport();
  const conn = await t.connect({ port, secret: SECRET });
  const ch = conn.openChannel('desc');
  await ch.send(new Uint8Array(1));
  const dm = await ch.receive();
  const desc = decodeReadDescriptor(dm.bytes);
  dm.release();

  const cases = SIZES.map((size) => {
    const dst = conn.allocator.alloc(N * size);
    const list = new ReadList(N);
    // Scattered remote offsets (a stride prime to the region), in-order destinations.
    const slots = Math.floor(REGION / size);
    const fill = () => {
      list.clear();
      for (let k = 0; k < N; k++) list.add(((k * 7919) % slots) * size, size, dst, k * size);
    };
    fill();
    return { size, dst, list, fill, slots };
  });
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) * 1000; // ns
  };
  const results = new Map<string, number[]>();
  const note = (k: string, v: number) => results.set(k, [...(results.get(k) ?? []), v]);
  // Warm-up: every path optimized before the first round.
  for (const c of cases) {
    for (let i = 0; i < 200; i++) {
      c.fill();
      await conn.read(desc, c.list);
    }
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const c of cases) {
      let t0 = cpu();
      for (let i = 0; i < CALLS; i++) c.fill();
      note(`fill ${c.size}`, (cpu() - t0) / CALLS / N);
      t0 = cpu();
      for (let i = 0; i < CALLS; i++) await conn.read(desc, c.list);
      note(`read ${c.size}`, (cpu() - t0) / CALLS / N);
    }
  }
  // Check: the last read brought the right bytes.
  for (const c of cases) {
    const k = N - 1;
    const off = ((k * 7919) % c.slots) * c.size;
    for (let j = 0; j < c.size; j++)
      if (c.dst.bytes[k * c.size + j] !== ((off + j) & 255)) throw new Error('bad bytes');
  }
  const f = (a: number[]) => `${Math.min(...a).toFixed(0)}–${Math.max(...a).toFixed(0)}`;
  console.log(
    `N=${N} READs per list, ${CALLS} calls per round, ${ROUNDS} interleaved rounds: client CPU ns per READ (min–max)`,
  );
  for (const size of SIZES) {
    const fl = results.get(`fill ${size}`) as number[];
    const rd = results.get(`read ${size}`) as number[];
    const sum = fl.map((v, i) => v + (rd[i] as number));
    console.log(
      `${String(size).padStart(4)} B  fill ${f(fl).padEnd(9)}  read ${f(rd).padEnd(9)}  total ${f(sum)}`,
    );
  }
  conn.destroy();
  t.close();
  child.kill();
}

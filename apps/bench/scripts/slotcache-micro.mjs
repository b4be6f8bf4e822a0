// Client CPU and READs per one-sided fetch key, slot hints on vs off, interleaved in one run.
// The evaluation's request pool (1024 Zipf 0.99 requests over 1M keys, mean ≈ 150 keys), but
// the table PREFILLED with every key of the pool (the evaluation fetches an empty table).
// Shards and client share this process (soft READs cost only the reader's CPU; a two-sided
// fallback's shard work is counted too). `cpu µs/key` is the process's CPU over every
// requested key; `one-sided` the share of keys READ (the rest: duplicates, fallbacks).
// Run from apps/bench of a built worktree: node scripts/slotcache-micro.mjs [rounds] [pulls]
// (env CONC=<pulls in flight>, POOL=<requests>, TCP=1 adds a two-sided TCP client).
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const require = createRequire(`${process.cwd()}/package.json`);
const imp = (m) => import(pathToFileURL(require.resolve(m)).href);
const { RdmaTransport } = await imp('@rdmajs/mux');
const { PsService, parseServiceTables } = await imp('@rdmajs/ps-service');
const { TcpTransport } = await imp('@rdmajs/tcp');
const { PsClient } = await imp('@rdmajs/ps-client');
const { drawRequests } = await import(
  pathToFileURL(`${process.cwd()}/dist/scenarios/evaluation/inference.js`).href
);

const ROUNDS = Number(process.argv[2] ?? 5);
const PULLS = Number(process.argv[3] ?? 400);
const CONC = Number(process.env.CONC ?? 1);
const secret = 'slotcache-micro-secret-0123456789';
const spec = {
  tables: [
    {
      name: 'emb',
      dim: 64,
      optimizer: { kind: 'sgd', lr: 0.01 },
      budgetBytes: 96 * 1024 * 1024,
      oneSidedRead: true,
    },
  ],
};
const requests = drawRequests(
  { keySpace: 1_000_000, zipfExponent: 0.99, requests: Number(process.env.POOL ?? 1024) },
  20261204,
);
const services = [];
const transports = [];
for (let i = 0; i < 3; i++) {
  const t = new RdmaTransport();
  transports.push(t);
  services.push(
    await PsService.start({
      listen: [
        { transport: t, port: 0 },
        { transport: new TcpTransport(), port: 0 },
      ],
      secret,
      shardId: `s${i}`,
      tables: parseServiceTables(spec),
    }),
  );
}
const connect = (o, transport = 'rdma') =>
  PsClient.connect({
    servers: services.map((s) => ({
      port: s.portOf(transport),
      ports: { rdma: s.portOf('rdma'), tcp: s.portOf('tcp') },
    })),
    transport,
    secret,
    deadlineMs: 10_000,
    // Measures one-sided reads: the load gate would send these closed loops two-sided.
    oneSidedMaxLoad: 1,
    ...o,
  });
const variants = { hints: await connect({}), none: await connect({ oneSidedSlotHints: 0 }) };
if (process.env.TCP) variants.tcp = await connect({}, 'tcp');
// Prefill: every distinct key of the pool gets a row.
const distinct = [...new Set(requests.flatMap((r) => [...r]))];
for (let i = 0; i < distinct.length; i += 1024) {
  const k = BigUint64Array.from(distinct.slice(i, i + 1024));
  await variants.none.push('emb', k, new Float32Array(k.length * 64).fill(0.01));
}
console.log(`prefilled ${distinct.length} keys; pool ${requests.length} requests`);
// One out buffer per batch size (not per request: first touches of fresh pages would be
// charged to whichever variant reads a request first).
const bySize = new Map();
const outs = requests.map((r) => {
  if (!bySize.has(r.length)) bySize.set(r.length, new Float32Array(r.length * 64));
  return bySize.get(r.length);
});
async function run(c, pulls, start) {
  let cursor = start;
  const s0 = c.stats().oneSided;
  const cpu0 = process.cpuUsage();
  const lat = [];
  let keys = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (pulls-- > 0) {
      const j = cursor++ % requests.length;
      const a = performance.now();
      await c.pullInto('emb', requests[j], outs[j]);
      lat.push(performance.now() - a);
      keys += requests[j].length;
      if ((cursor & 15) === 0) await new Promise(setImmediate);
    }
  };
  await Promise.all(Array.from({ length: CONC }, worker));
  const wall = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const s1 = c.stats().oneSided;
  lat.sort((x, y) => x - y);
  const rk = s1.keys - s0.keys;
  return {
    cpuUsPerKey: (cpu.user + cpu.system) / keys,
    readsPerKey: (s1.reads - s0.reads) / Math.max(1, rk),
    hintedShare: (s1.hinted - s0.hinted) / Math.max(1, rk),
    oneSidedShare: rk / keys,
    meanMs: lat.reduce((a, b) => a + b, 0) / lat.length,
    p99Ms: lat[Math.floor(lat.length * 0.99)],
    kKeysPerS: keys / wall,
  };
}
for (const c of Object.values(variants)) await run(c, 1024, 0); // warm-up: JIT and hints
const res = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
for (let r = 0; r < ROUNDS; r++)
  for (const name of r % 2 ? Object.keys(variants).reverse() : Object.keys(variants))
    res[name].push(await run(variants[name], PULLS, 1024 + r * PULLS)); // the same requests for both
const f = (x) => x.toFixed(3);
for (const [name, rows] of Object.entries(res)) {
  console.log(`== ${name}`);
  for (const x of rows)
    console.log(
      `cpu µs/key ${f(x.cpuUsPerKey)}  READs/key ${f(x.readsPerKey)}  hinted ${f(x.hintedShare)}  one-sided ${f(x.oneSidedShare)}  mean ${f(x.meanMs)} ms  p99 ${f(x.p99Ms)} ms  ${f(x.kKeysPerS)} kkeys/s`,
    );
}
const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
for (let r = 0; r < ROUNDS; r++) {
  const h = res.hints[r];
  const n = res.none[r];
  console.log(
    `round ${r}: cpu/key hints÷none ${f(h.cpuUsPerKey / n.cpuUsPerKey)}  mean ${f(h.meanMs / n.meanMs)}  p99 ${f(h.p99Ms / n.p99Ms)}`,
  );
  const t = res.tcp?.[r];
  if (t)
    console.log(
      `round ${r}: ÷tcp (all in-process: client+shards) cpu/key hints ${f(h.cpuUsPerKey / t.cpuUsPerKey)} none ${f(n.cpuUsPerKey / t.cpuUsPerKey)}  mean hints ${f(h.meanMs / t.meanMs)} none ${f(n.meanMs / t.meanMs)}`,
    );
}
console.log(
  `median cpu/key hints ${f(med(res.hints.map((x) => x.cpuUsPerKey)))} none ${f(med(res.none.map((x) => x.cpuUsPerKey)))}`,
);
await Promise.all(Object.values(variants).map((c) => c.close()));
await Promise.all(services.map((s) => s.close()));
for (const t of transports) await t.close();

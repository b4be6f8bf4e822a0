#!/usr/bin/env node
// A plain node:net ping-pong, as a new user would write it: no tsx, no repo imports, the
// peer in a forked process. `rdmajs-bench --check-baselines` runs it beside the bench's own
// TCP rows so a slow bench baseline cannot flatter the RDMA side.
//
//   node tcp-pingpong.mjs [--sizes 64,4096,65536,1048576] [--iterations 5000[,...]] [--warmup 2000[,...]]
//
// The bench passes its own per-size counts; the default warm-up (N/10, and from 64 KiB up 2000
// round trips or 256 MiB moved if less) is what Node's TCP path at 64 KiB needs to settle.
//
// Prints {"node", "results": [{ sizeBytes, iterations, p50Us, meanUs, p99Us }]} to stdout.
//
//   node tcp-pingpong.mjs --serve
//
// keeps one process and peer for many rounds (what --check-baselines interleaves with the
// bench's rows): each stdin line {"size","iterations","warmup"} gets one stdout line
// { sizeBytes, iterations, p50Us, meanUs, p99Us } (or {"error"}); it exits at end of input.
import { fork } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const TIMEOUT_MS = 120_000;

function peer() {
  // One server per size; the reply is preallocated and written once the whole message is in.
  process.on('message', (m) => {
    if (m.op === 'exit') process.exit(0);
    const size = m.size;
    const reply = Buffer.alloc(size, 2);
    const server = createServer((sock) => {
      sock.setNoDelay(true);
      let have = 0;
      sock.on('data', (d) => {
        have += d.length;
        while (have >= size) {
          have -= size;
          sock.write(reply);
        }
      });
      sock.on('error', () => sock.destroy());
      sock.on('close', () => server.close());
    });
    server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  });
  process.send({ started: true });
}

function parseArgs(argv) {
  const o = { sizes: [64, 4096, 65536, 1 << 20], iterations: [5000], warmup: undefined };
  for (let i = 0; i < argv.length; i += 2) {
    const list = String(argv[i + 1] ?? '')
      .split(',')
      .map(Number);
    if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n <= 0))
      throw new Error(`${argv[i]} needs positive integers, got ${argv[i + 1]}`);
    if (argv[i] === '--sizes') o.sizes = list;
    else if (argv[i] === '--iterations') o.iterations = list;
    else if (argv[i] === '--warmup') o.warmup = list;
    else throw new Error(`unknown option ${argv[i]}`);
  }
  if (o.iterations.length !== 1 && o.iterations.length !== o.sizes.length)
    throw new Error('--iterations takes one count or one per size');
  if (o.warmup && o.warmup.length !== 1 && o.warmup.length !== o.sizes.length)
    throw new Error('--warmup takes one count or one per size');
  return o;
}

function next(child) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('peer did not answer in time')), TIMEOUT_MS);
    child.once('message', (m) => {
      clearTimeout(t);
      resolve(m);
    });
  });
}

/** Ping-pong driven from 'data' callbacks: the next message goes out when the reply is in. */
function pingPong(port, size, iterations, warmup) {
  return new Promise((resolve, reject) => {
    const sock = connect({ port, host: '127.0.0.1', noDelay: true });
    const payload = Buffer.alloc(size, 1);
    const samples = new Float64Array(iterations);
    const total = warmup + iterations;
    let k = 0;
    let have = 0;
    let t0 = 0;
    const t = setTimeout(() => {
      sock.destroy();
      reject(new Error(`ping-pong ${size} B timed out`));
    }, TIMEOUT_MS);
    const send = () => {
      t0 = performance.now();
      sock.write(payload);
    };
    sock.on('connect', send);
    sock.on('error', (err) => {
      clearTimeout(t);
      reject(err);
    });
    sock.on('data', (d) => {
      have += d.length;
      if (have < size) return;
      have -= size;
      if (k >= warmup) samples[k - warmup] = (performance.now() - t0) * 1000;
      if (++k < total) return send();
      clearTimeout(t);
      sock.end();
      resolve(samples);
    });
  });
}

function summarize(samples) {
  const sorted = Float64Array.from(samples).sort();
  const at = (p) => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)];
  let sum = 0;
  for (const s of sorted) sum += s;
  return { p50Us: at(0.5), meanUs: sum / sorted.length, p99Us: at(0.99) };
}

function startPeer() {
  const child = fork(fileURLToPath(import.meta.url), ['--peer'], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return next(child).then(() => child);
}

async function measure(child, size, iterations, warmup) {
  child.send({ op: 'listen', size });
  const { port } = await next(child);
  const samples = await pingPong(port, size, iterations, warmup);
  return { sizeBytes: size, iterations, ...summarize(samples) };
}

async function serve() {
  const child = await startPeer();
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      if (line.trim() === '') continue;
      let out;
      try {
        const { size, iterations, warmup } = JSON.parse(line);
        if (![size, iterations, warmup].every((n) => Number.isInteger(n) && n > 0))
          throw new Error('size, iterations and warmup must be positive integers');
        out = await measure(child, size, iterations, warmup);
      } catch (err) {
        out = { error: err.message };
      }
      process.stdout.write(`${JSON.stringify(out)}\n`);
    }
  } finally {
    child.send({ op: 'exit' });
  }
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const child = await startPeer();
  try {
    const results = [];
    for (let i = 0; i < o.sizes.length; i++) {
      const size = o.sizes[i];
      const iterations = o.iterations[o.iterations.length === 1 ? 0 : i];
      const warmup = o.warmup
        ? o.warmup[o.warmup.length === 1 ? 0 : i]
        : Math.max(
            10,
            Math.floor(iterations / 10),
            size >= 65536 ? Math.min(2000, Math.ceil((256 << 20) / size)) : 0,
          );
      results.push(await measure(child, size, iterations, warmup));
    }
    process.stdout.write(`${JSON.stringify({ node: process.version, results })}\n`);
  } finally {
    child.send({ op: 'exit' });
  }
}

if (process.argv[2] === '--peer') peer();
else
  (process.argv[2] === '--serve' ? serve() : main()).catch((err) => {
    process.stderr.write(`tcp-pingpong: ${err.message}\n`);
    process.exit(1);
  });

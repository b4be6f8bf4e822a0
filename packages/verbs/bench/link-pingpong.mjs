#!/usr/bin/env node
// Issue 10's link row, standalone: soft over its TCP link vs a plain node:net ping-pong,
// 64 B, two processes, interleaved rounds (noisy machine: only same-run ratios mean much).
//
//   node packages/verbs/bench/link-pingpong.mjs [rounds=5] [roundTrips=10000] [size=64]
//
// Each side of the link row waits as a new user would: poll, else `await
// cq.waitForCompletion()` (default spin). EVENTS=1: both sides are driven by the CQ's
// 'completion' event instead (poll, re-arm with requestNotify: callbacks, no promise per
// wait), as the TCP row is by the socket's 'data' event. Prints per-round p50s and the ratio
// of each round.
// LINK_ONLY=1 runs the link row alone, TCP_ONLY=1 the TCP row alone (for a profiler).
import { fork } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

// VERBS_DIST: another build of this package to measure (a copy of dist/ beside it).
const { Access, allocCompletions, openDevice } = await import(
  new URL(`../${process.env.VERBS_DIST ?? 'dist'}/index.js`, import.meta.url).href
);

const [ROUNDS = 5, N = 10_000, SIZE = 64] = process.argv.slice(2).map(Number);
const EVENTS = process.env.EVENTS === '1';
const WARMUP = 1000;
const DEPTH = 64;
const SIGNAL_EVERY = 16;

function linkSide() {
  const dev = openDevice({ provider: 'soft', link: 'tcp' });
  const pd = dev.allocPd();
  const mr = pd.allocMr(2 * SIZE, Access.LocalWrite | Access.RemoteWrite | Access.RemoteRead);
  const cq = dev.createCq({ capacity: 4 * DEPTH });
  const qp = pd.createQp({
    sendCq: cq,
    recvCq: cq,
    maxSendWr: DEPTH,
    maxRecvWr: DEPTH,
    maxSendSge: 1,
    maxRecvSge: 1,
    maxInlineData: 64,
  });
  qp.toInit();
  const recv = { wrId: 1, sgList: [mr.sge(0, SIZE)] };
  for (let i = 0; i < DEPTH; i++) qp.postRecv(recv);
  const wr = {
    wrId: 0,
    opcode: 'SEND',
    signaled: false,
    inline: true,
    sgList: [mr.sge(SIZE, SIZE)],
  };
  return { dev, cq, qp, recv, wr, wcs: allocCompletions(32) };
}

/** Waits until a RECV completion is polled (event-driven, bounded by the wait's deadline). */
async function awaitRecv(s) {
  for (;;) {
    const n = s.cq.poll(s.wcs);
    let got = false;
    for (let i = 0; i < n; i++) if (s.wcs[i].opcode === 'RECV') got = true;
    if (got) return;
    await s.cq.waitForCompletion({});
  }
}

function cpuNow() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

function p50(samples) {
  samples.sort((a, b) => a - b);
  return samples[samples.length >> 1];
}

// ---- child: the echo peer of both rows ----
async function child() {
  let s;
  process.on('message', async (m) => {
    if (m.op === 'link-setup') {
      s = linkSide();
      await s.dev.listen();
      process.send({ endpoint: s.qp.endpoint() });
    } else if (m.op === 'cpu') {
      process.send({ cpu: cpuNow() });
    } else if (m.op === 'link-run' && EVENTS) {
      s.qp.connect(m.endpoint);
      let k = 0;
      // Echo from the 'completion' event: poll, answer each RECV, re-arm.
      s.cq.on('completion', () => {
        const n = s.cq.poll(s.wcs);
        for (let i = 0; i < n; i++) {
          if (s.wcs[i].opcode !== 'RECV') continue;
          s.wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
          s.qp.postSend(s.wr);
          s.qp.postRecv(s.recv);
          if (++k === m.n) return process.send({ done: true });
        }
        s.cq.requestNotify();
      });
      s.cq.requestNotify();
      process.send({ ready: true });
    } else if (m.op === 'link-run') {
      s.qp.connect(m.endpoint);
      process.send({ ready: true });
      for (let k = 0; k < m.n; k++) {
        await awaitRecv(s);
        s.wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
        s.qp.postSend(s.wr);
        s.qp.postRecv(s.recv);
      }
      process.send({ done: true });
    } else if (m.op === 'tcp') {
      const reply = Buffer.alloc(SIZE, 2);
      const server = createServer((sock) => {
        sock.setNoDelay(true);
        let have = 0;
        sock.on('data', (d) => {
          have += d.length;
          while (have >= SIZE) {
            have -= SIZE;
            sock.write(reply);
          }
        });
        sock.on('error', () => sock.destroy());
        sock.on('close', () => server.close());
      });
      server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
    } else if (m.op === 'exit') {
      s?.dev.close();
      process.exit(0);
    }
  });
}

function next(c) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('peer did not answer in time')), 120_000);
    c.once('message', (m) => {
      clearTimeout(t);
      resolve(m);
    });
  });
}

async function linkRound(c, n) {
  c.send({ op: 'link-setup' });
  const { endpoint } = await next(c);
  const s = linkSide();
  await s.dev.listen();
  s.qp.connect(endpoint);
  c.send({ op: 'link-run', endpoint: s.qp.endpoint(), n: n + WARMUP });
  await next(c);
  const lat = new Float64Array(n);
  let cpu0 = 0;
  let peer0 = 0;
  if (EVENTS) {
    const cpu = await linkEvents(s, c, n, lat, (p) => {
      peer0 = p;
    });
    await next(c);
    c.send({ op: 'cpu' });
    const peer = (await next(c)).cpu - peer0;
    s.dev.close();
    return { p50: p50(lat), cpu: (cpu + peer) / n };
  }
  for (let k = 0; k < n + WARMUP; k++) {
    if (k === WARMUP) {
      c.send({ op: 'cpu' });
      peer0 = (await next(c)).cpu;
      cpu0 = cpuNow();
    }
    const t0 = performance.now();
    s.wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
    s.qp.postSend(s.wr);
    await awaitRecv(s);
    if (k >= WARMUP) lat[k - WARMUP] = (performance.now() - t0) * 1000;
    s.qp.postRecv(s.recv);
  }
  const cpu = cpuNow() - cpu0;
  await next(c);
  c.send({ op: 'cpu' });
  const peer = (await next(c)).cpu - peer0;
  s.dev.close();
  return { p50: p50(lat), cpu: (cpu + peer) / n };
}

/** The measuring side driven by 'completion' events; resolves with its CPU over the measured part. */
function linkEvents(s, c, n, lat, setPeer0) {
  return new Promise((resolve) => {
    let k = 0;
    let cpu0 = 0;
    let t0 = 0;
    const send = () => {
      t0 = performance.now();
      s.wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
      s.qp.postSend(s.wr);
    };
    s.cq.on('completion', () => {
      const got = s.cq.poll(s.wcs);
      for (let i = 0; i < got; i++) {
        if (s.wcs[i].opcode !== 'RECV') continue;
        if (k >= WARMUP) lat[k - WARMUP] = (performance.now() - t0) * 1000;
        s.qp.postRecv(s.recv);
        if (++k === n + WARMUP) return resolve(cpuNow() - cpu0);
        if (k === WARMUP) {
          // The peer's CPU at the start of the measured part, asked without stopping.
          c.send({ op: 'cpu' });
          next(c).then((m) => setPeer0(m.cpu));
          cpu0 = cpuNow();
        }
        send();
      }
      s.cq.requestNotify();
    });
    s.cq.requestNotify();
    send();
  });
}

async function tcpRound(c, n) {
  c.send({ op: 'tcp' });
  const { port } = await next(c);
  const lat = new Float64Array(n);
  const msg = Buffer.alloc(SIZE, 1);
  let cpu0 = 0;
  let peer0 = 0;
  const cpu = await new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1', () => {
      sock.setNoDelay(true);
      let k = 0;
      let have = 0;
      let t0 = performance.now();
      sock.on('data', (d) => {
        have += d.length;
        while (have >= SIZE) {
          have -= SIZE;
          if (k >= WARMUP) lat[k - WARMUP] = (performance.now() - t0) * 1000;
          if (++k === n + WARMUP) {
            const cpu = cpuNow() - cpu0;
            sock.end();
            return resolve(cpu);
          }
          if (k === WARMUP) {
            // The peer's CPU at the start of the measured part, asked without stopping.
            c.send({ op: 'cpu' });
            next(c).then((m) => {
              peer0 = m.cpu;
            });
            cpu0 = cpuNow();
          }
          t0 = performance.now();
          sock.write(msg);
        }
      });
      sock.write(msg);
    });
    sock.on('error', reject);
  });
  c.send({ op: 'cpu' });
  const peer = (await next(c)).cpu - peer0;
  return { p50: p50(lat), cpu: (cpu + peer) / n };
}

if (process.argv[2] === '--child') await child();
else {
  const c = fork(fileURLToPath(import.meta.url), ['--child']);
  const ratios = [];
  const cpuRatios = [];
  const NONE = { p50: Number.NaN, cpu: Number.NaN };
  for (let r = 0; r < ROUNDS; r++) {
    // Alternate the order so neither row always runs first.
    let tcp = NONE;
    let link = NONE;
    if (process.env.LINK_ONLY) link = await linkRound(c, N);
    else if (process.env.TCP_ONLY) tcp = await tcpRound(c, N);
    else if (r % 2 === 0) {
      link = await linkRound(c, N);
      tcp = await tcpRound(c, N);
    } else {
      tcp = await tcpRound(c, N);
      link = await linkRound(c, N);
    }
    ratios.push(link.p50 / tcp.p50);
    cpuRatios.push(link.cpu / tcp.cpu);
    console.log(
      `round ${r}: p50 link ${link.p50.toFixed(1)} µs, tcp ${tcp.p50.toFixed(1)} µs, ratio ${(link.p50 / tcp.p50).toFixed(3)}; CPU/round trip (both sides) link ${link.cpu.toFixed(1)} µs, tcp ${tcp.cpu.toFixed(1)} µs, ratio ${(link.cpu / tcp.cpu).toFixed(3)}`,
    );
  }
  const spread = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return `median ${s[s.length >> 1].toFixed(3)} (min ${s[0].toFixed(3)}, max ${s[s.length - 1].toFixed(3)})`;
  };
  console.log(`p50 ratio ${spread(ratios)}; CPU ratio ${spread(cpuRatios)}`);
  c.send({ op: 'exit' });
}

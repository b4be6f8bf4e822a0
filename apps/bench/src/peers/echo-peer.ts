// The bench's echo peer, run as a real child process: a TCP echo server, or the far end
// of a verbs ping-pong. It reports its own CPU time so CPU per op counts both sides.
import { createServer, type Socket } from 'node:net';
import type { SendWr } from '@rdmajs/verbs';
import { cpuNowUs } from '../stats/cpu.js';
import { SpinDeadline } from '../stats/deadline.js';
import { onEachReceive } from './onEachReceive.js';
import { type PeerRequest, pingPongWr, type WaitMode } from './protocol.js';
import { QUEUE_DEPTH, SIGNAL_EVERY, VerbsSide } from './VerbsSide.js';

let side: VerbsSide | undefined;

function reply(id: number, result: unknown): void {
  process.send?.({ id, result });
}

function tcpListen(id: number, size: number, throughputBytes?: number): void {
  const server = createServer((sock: Socket) => {
    sock.setNoDelay(true);
    let have = 0;
    let total = 0;
    // Preallocated: one reply per whole message, no concat or slice of what arrived.
    const reply = Buffer.alloc(throughputBytes === undefined ? size : 0, 2);
    sock.on('data', (d: Buffer) => {
      if (throughputBytes !== undefined) {
        total += d.length;
        if (total >= throughputBytes) {
          total -= throughputBytes;
          sock.write('k');
        }
        return;
      }
      have += d.length;
      while (have >= size) {
        have -= size;
        sock.write(reply);
      }
    });
    sock.on('error', () => sock.destroy());
  });
  server.listen(0, '127.0.0.1', () => {
    const addr = server.address();
    reply(id, { port: typeof addr === 'object' && addr ? addr.port : 0 });
  });
}

type RunRequest = Extract<PeerRequest, { op: 'verbs-run' }>;

/**
 * The event-driven echo: SEND back on each receive, waiting between them with
 * `await cq.waitForCompletion(wait)` as a new user would (no busy loop of its own).
 */
async function verbsRunEvents(req: RunRequest, wait: WaitMode): Promise<number> {
  const s = side as VerbsSide;
  s.qp.connect(req.endpoint);
  const { size, iterations, warmup } = req;
  let cpu0 = cpuNowUs();
  const wr: SendWr = pingPongWr('send', s.mr.sge(size, size), req);
  const recv = { wrId: 1, sgList: [s.mr.sge(0, size)] };
  process.send?.({ ready: true });
  const { cq, qp, wcs } = s;
  for (let k = 0; k < iterations; k++) {
    if (k === warmup) cpu0 = cpuNowUs();
    let got = false;
    for (;;) {
      const n = cq.poll(wcs);
      for (let i = 0; i < n; i++) if (wcs[i]?.opcode === 'RECV') got = true;
      if (got) break;
      await cq.waitForCompletion(wait);
    }
    wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
    qp.postSend(wr);
    qp.postRecv(recv);
  }
  return cpuNowUs() - cpu0;
}

/**
 * The echo driven by the CQ's 'completion' event: poll, SEND back on each receive, re-arm with
 * requestNotify — callbacks, as a node:net server answers from 'data'. Resolves with its CPU.
 */
async function verbsRunListener(req: RunRequest): Promise<number> {
  const s = side as VerbsSide;
  s.qp.connect(req.endpoint);
  const { size, iterations, warmup } = req;
  const wr: SendWr = pingPongWr('send', s.mr.sge(size, size), req);
  const recv = { wrId: 1, sgList: [s.mr.sge(0, size)] };
  const { cq, qp, wcs } = s;
  let k = 0;
  let cpu0 = cpuNowUs();
  const done = onEachReceive({
    cq,
    wcs,
    onReceive: () => {
      if (k === warmup) cpu0 = cpuNowUs();
      wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
      qp.postSend(wr);
      qp.postRecv(recv);
      return ++k === iterations;
    },
    progress: () => `peer ping-pong: ${k} of ${iterations}`,
  });
  process.send?.({ ready: true });
  await done;
  return cpuNowUs() - cpu0;
}

/** Echoes `iterations` messages: SEND back on each receive, or WRITE back on each write seen. */
function verbsRun(req: RunRequest): number {
  const s = side as VerbsSide;
  s.qp.connect(req.endpoint);
  const { size, iterations, warmup } = req;
  let cpu0 = cpuNowUs();
  const deadline = new SpinDeadline(120_000, `peer ${req.mode} ping-pong`);
  const sge = s.mr.sge(size, size); // outgoing; incoming lands in [0, size)
  const wr: SendWr = pingPongWr(req.mode, sge, req);
  const recv = { wrId: 1, sgList: [s.mr.sge(0, size)] };
  process.send?.({ ready: true });
  const bytes = s.mr.bytes;
  for (let k = 0; k < iterations; k++) {
    if (k === warmup) cpu0 = cpuNowUs();
    if (req.mode === 'send') {
      let got = false;
      while (!got) {
        const n = s.cq.poll(s.wcs);
        for (let i = 0; i < n; i++) if (s.wcs[i]?.opcode === 'RECV') got = true;
        deadline.check();
      }
    } else {
      const seq = (k % 255) + 1;
      // Polling moves soft's large WRITEs on (see the scenario's loop).
      while (bytes[size - 1] !== seq) {
        s.cq.pending();
        deadline.check();
      }
      bytes[2 * size - 1] = seq;
      s.cq.poll(s.wcs);
    }
    wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
    s.qp.postSend(wr);
    // Re-post the consumed receive after replying: off the critical path (64 are posted).
    if (req.mode === 'send') s.qp.postRecv(recv);
  }
  return cpuNowUs() - cpu0;
}

async function setup(msg: Extract<PeerRequest, { op: 'verbs-setup' }>) {
  side?.close();
  const s = new VerbsSide(msg.provider, msg.bytes, msg.link);
  side = s;
  if (msg.link === 'tcp') await s.listen();
  const recv = { wrId: 1, sgList: [s.mr.sge(0, s.mr.length)] };
  for (let i = 0; i < QUEUE_DEPTH; i++) s.qp.postRecv(recv);
  return { endpoint: s.qp.endpoint(), addr: s.mr.addr, rkey: s.mr.rkey };
}

process.on('message', (msg: PeerRequest & { id: number }) => {
  try {
    switch (msg.op) {
      case 'tcp-listen':
        return tcpListen(msg.id, msg.size, msg.throughputBytes);
      case 'cpu':
        return reply(msg.id, cpuNowUs());
      case 'verbs-setup':
        return void setup(msg).then(
          (r) => reply(msg.id, r),
          (err: Error) => process.send?.({ id: msg.id, error: err.message }),
        );
      case 'verbs-run':
        if (msg.wait === undefined && msg.listener !== true)
          return reply(msg.id, { cpuUs: verbsRun(msg) });
        return void (
          msg.listener === true ? verbsRunListener(msg) : verbsRunEvents(msg, msg.wait ?? {})
        ).then(
          (cpuUs) => reply(msg.id, { cpuUs }),
          (err: Error) => process.send?.({ id: msg.id, error: err.message }),
        );
      case 'verbs-sink':
        (side as VerbsSide).qp.connect(msg.endpoint);
        return reply(msg.id, true);
      case 'exit':
        side?.close();
        reply(msg.id, true);
        return setImmediate(() => process.exit(0));
    }
  } catch (err) {
    process.send?.({ id: msg.id, error: (err as Error).message });
  }
});
process.send?.({ started: true });

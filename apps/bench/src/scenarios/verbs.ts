import { fork } from 'node:child_process';
import type { SendWr, Sge } from '@rdmajs/verbs';
import type { EchoPeer } from '../peers/EchoPeer.js';
import { onEachReceive } from '../peers/onEachReceive.js';
import { peerExecArgv, peerScriptPath } from '../peers/peerLaunch.js';
import { pingPongWr, type VerbsSetup, type WaitMode } from '../peers/protocol.js';
import { QUEUE_DEPTH, SIGNAL_EVERY, VerbsSide } from '../peers/VerbsSide.js';
import { type Result, throughputResult } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { SpinDeadline } from '../stats/deadline.js';
import { HeapMeter } from '../stats/HeapMeter.js';
import { LatencyRecorder } from '../stats/LatencyRecorder.js';

type Provider = 'soft' | 'ibverbs';

/** A ping-pong variant: wait on events instead of busy-polling; soft over its TCP link. */
export interface PingPongVariant {
  wait?: WaitMode;
  /** Both sides driven by the CQ's 'completion' event (poll, requestNotify), not awaits. */
  listener?: true;
  link?: 'tcp';
}

function opName(mode: 'send' | 'write', v: PingPongVariant): string {
  const base = mode === 'send' ? 'send-pingpong' : 'write-pingpong';
  const wait = v.listener
    ? '-completion-event'
    : v.wait === undefined
      ? ''
      : v.wait.spinUs === 0
        ? '-events'
        : '-events-default-spin';
  return `${base}${wait}${v.link === 'tcp' ? '-link-tcp' : ''}`;
}

/**
 * The measuring side of a `listener` row: SEND, then the next SEND from the CQ's
 * 'completion' event once the answer's RECV is polled (re-armed with requestNotify) — the
 * callbacks a node:net client runs from 'data', no promise per round trip. Resolves with this
 * side's CPU over the measured round trips.
 */
async function listenerRounds(
  me: VerbsSide,
  wr: SendWr,
  recv: { wrId: number; sgList: Sge[] },
  total: number,
  warmup: number,
  rec: LatencyRecorder,
  onWarm: () => void,
): Promise<number> {
  const { cq, qp, wcs } = me;
  let k = 0;
  let cpu0 = cpuNowUs();
  let t0 = 0;
  const send = () => {
    if (k === warmup) {
      cpu0 = cpuNowUs();
      onWarm();
    }
    t0 = performance.now();
    wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
    qp.postSend(wr);
  };
  await onEachReceive({
    cq,
    wcs,
    onReceive: () => {
      if (k >= warmup) rec.record((performance.now() - t0) * 1000);
      qp.postRecv(recv);
      if (++k === total) return true;
      send();
      return false;
    },
    progress: () => `send ping-pong: ${k} of ${total} round trips`,
    start: send,
  });
  return cpuNowUs() - cpu0;
}

/**
 * Verbs ping-pong in the ib_send_lat / ib_write_lat style: both sides busy-poll.
 * `send`: SEND into the peer's posted receive, wait for its SEND back.
 * `write`: RDMA WRITE into the peer's buffer, wait for its WRITE back (last byte = sequence).
 * Samples go into `rec` (a caller pooling rounds passes its own).
 */
export async function verbsPingPong(
  peer: EchoPeer,
  provider: Provider,
  mode: 'send' | 'write',
  size: number,
  iterations: number,
  warmup: number,
  variant: PingPongVariant = {},
  rec: LatencyRecorder = new LatencyRecorder(),
): Promise<Result> {
  const { wait, link, listener } = variant;
  if ((wait !== undefined || listener) && mode !== 'send')
    throw new Error('event-driven rows are SEND rows');
  // Incoming data lands in [0, size), outgoing is built in [size, 2 size).
  const bytesNeeded = 2 * Math.max(size, 64);
  const remote = await peer.call<VerbsSetup>({
    op: 'verbs-setup',
    provider,
    bytes: bytesNeeded,
    ...(link === undefined ? {} : { link }),
  });
  const me = new VerbsSide(provider, bytesNeeded, link);
  try {
    if (link === 'tcp') await me.listen();
    me.qp.connect(remote.endpoint);
    const sge = me.mr.sge(size, size);
    const recv = { wrId: 1, sgList: [me.mr.sge(0, size)] };
    for (let i = 0; i < QUEUE_DEPTH; i++) me.qp.postRecv(recv);
    const wr: SendWr = pingPongWr(mode, sge, remote);
    const total = warmup + iterations;
    const ready = peer.ready();
    const done = peer.call<{ cpuUs: number }>({
      op: 'verbs-run',
      mode,
      size,
      iterations: total,
      warmup,
      endpoint: me.qp.endpoint(),
      addr: me.mr.addr,
      rkey: me.mr.rkey,
      ...(wait === undefined ? {} : { wait }),
      ...(listener ? { listener } : {}),
    });
    await ready;
    const deadline = new SpinDeadline(120_000, `${mode} ping-pong`);
    const bytes = me.mr.bytes;
    const { cq, qp, wcs } = me;
    const heap = new HeapMeter();
    // Busy-polling or awaiting waitForCompletion, per round trip; resolves with this side's CPU.
    async function loopRounds(): Promise<number> {
      let cpu0 = cpuNowUs();
      for (let k = 0; k < total; k++) {
        if (k === warmup) {
          cpu0 = cpuNowUs();
          heap.start();
        }
        const t0 = performance.now();
        const seq = (k % 255) + 1;
        if (mode === 'write') bytes[2 * size - 1] = seq;
        wr.signaled = k % SIGNAL_EVERY === SIGNAL_EVERY - 1;
        qp.postSend(wr);
        if (wait !== undefined) {
          // As a new user would: poll, else sleep in waitForCompletion (bounded by its deadline).
          for (;;) {
            const n = cq.poll(wcs);
            let got = false;
            for (let i = 0; i < n; i++) if (wcs[i]?.opcode === 'RECV') got = true;
            if (got) break;
            await cq.waitForCompletion(wait);
          }
        } else if (mode === 'send') {
          let got = false;
          while (!got) {
            const n = cq.poll(wcs);
            for (let i = 0; i < n; i++) if (wcs[i]?.opcode === 'RECV') got = true;
            deadline.check();
          }
        } else {
          // Polling moves soft's large WRITEs on (64 KiB pieces per turn): a spin on memory
          // alone would wait for its own WRITE forever (see the verbs README).
          while (bytes[size - 1] !== seq) {
            cq.pending();
            deadline.check();
          }
          cq.poll(wcs);
        }
        if (k >= warmup) rec.record((performance.now() - t0) * 1000);
        // Re-post the consumed receive outside the timed round trip (64 are posted).
        if (mode === 'send') qp.postRecv(recv);
      }
      return cpuNowUs() - cpu0;
    }
    const cpu = listener
      ? await listenerRounds(me, wr, recv, total, warmup, rec, () => heap.start())
      : await loopRounds();
    // Observer entries arrive asynchronously: let them in before reading the count.
    await new Promise((r) => setImmediate(r));
    const alloc = heap.stop(iterations);
    const { cpuUs: peerCpu } = await done;
    return {
      transport: provider,
      op: opName(mode, variant),
      sizeBytes: size,
      ...rec.summary(),
      // Both sides count the measured round trips only, as the TCP row does.
      cpuUsPerOp: (cpu + peerCpu) / iterations,
      ...alloc,
    };
  } finally {
    me.close();
  }
}

/** One-way RDMA WRITE throughput with `window` WRs outstanding. */
export async function verbsThroughput(
  peer: EchoPeer,
  provider: Provider,
  size: number,
  count: number,
  window = 8,
  link?: 'tcp',
): Promise<Result> {
  const remote = await peer.call<VerbsSetup>({
    op: 'verbs-setup',
    provider,
    bytes: size,
    ...(link === undefined ? {} : { link }),
  });
  const me = new VerbsSide(provider, size, link);
  try {
    if (link === 'tcp') await me.listen();
    me.qp.connect(remote.endpoint);
    await peer.call({ op: 'verbs-sink', endpoint: me.qp.endpoint() });
    const wr: SendWr = {
      wrId: 0,
      opcode: 'RDMA_WRITE',
      sgList: [me.mr.sge(0, size)],
      remoteAddr: remote.addr,
      rkey: remote.rkey,
    };
    const deadline = new SpinDeadline(120_000, 'write throughput');
    const peerCpu0 = await peer.call<number>({ op: 'cpu' });
    const cpu0 = cpuNowUs();
    const t0 = performance.now();
    let posted = 0;
    let completed = 0;
    while (completed < count) {
      while (posted < count && posted - completed < window) {
        me.qp.postSend(wr);
        posted++;
      }
      const n = me.cq.poll(me.wcs);
      for (let i = 0; i < n; i++) {
        if (me.wcs[i]?.status !== 'SUCCESS')
          throw new Error(`RDMA WRITE failed: ${me.wcs[i]?.status}`);
      }
      completed += n;
      // Over the link the frames and answers move on the event loop: wait there.
      if (link === 'tcp' && n === 0) await me.cq.waitForCompletion();
      else deadline.check();
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu = cpuNowUs() - cpu0;
    const peerCpu = (await peer.call<number>({ op: 'cpu' })) - peerCpu0;
    const op = link === 'tcp' ? 'write-throughput-link-tcp' : 'write-throughput';
    return throughputResult(provider, op, size, count, seconds, cpu + peerCpu);
  } finally {
    me.close();
  }
}

/**
 * CPU used by a process waiting on an idle completion queue for `ms`: the adaptive
 * poller must sleep on the doorbell, not spin.
 */
export async function verbsIdle(provider: Provider, ms: number): Promise<Result> {
  const me = new VerbsSide(provider, 4096);
  try {
    const cpu0 = cpuNowUs();
    const t0 = performance.now();
    await me.cq.waitForCompletion({ timeoutMs: ms }).catch((err: { code?: string }) => {
      if (err.code !== 'ERR_RDMA_TIMEOUT') throw err;
    });
    const wallUs = (performance.now() - t0) * 1000;
    const cpu = cpuNowUs() - cpu0;
    return {
      transport: provider,
      op: 'idle-wait',
      sizeBytes: 0,
      p50Us: wallUs,
      meanUs: wallUs,
      p99Us: wallUs,
      cpuUsPerOp: cpu,
      idleCpuPercent: (100 * cpu) / wallUs,
    };
  } finally {
    me.close();
  }
}

/**
 * Event-loop delay while one large RDMA WRITE runs (`monitorEventLoopDelay`, 1 ms
 * resolution), between two devices of a process started for this cell alone
 * (`peers/loop-delay-child.ts`): the first WRITE into registered memory never touched, in a
 * fresh process, is the row's p50/mean/p99/max; a second WRITE (`warm*`), the registration
 * (`registerUs`, synchronous), the application's own fill of its source (`fillUs`), a plain
 * `Uint8Array.set` and the idle loop (what the host alone adds) are stated beside it. Delays
 * are the loop's stalls beyond its 1 ms sampling interval, in µs; `cpuHeldMaxUs` is the
 * longest the JS thread ran on a CPU between two ticks (the stall the code caused, without the
 * time a shared host gave to other processes); CPU is that process's (it is both ends).
 */
export function verbsLoopDelay(provider: Provider, bytes: number): Promise<Result> {
  const script = peerScriptPath('../peers/loop-delay-child', import.meta.url);
  const proc = fork(script, [provider, String(bytes)], {
    execArgv: [...peerExecArgv],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise<Result>((resolve, reject) => {
    // Page faults of 2 GiB on a loaded 2-core host took 20–30 s: a generous bound.
    const t = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error('the write-loop-delay cell took more than 600 s'));
    }, 600_000);
    proc.once('message', (m: { result?: Result; error?: string }) => {
      clearTimeout(t);
      if (m.result) resolve(m.result);
      else reject(new Error(`write-loop-delay: ${m.error ?? 'no result'}`));
    });
    proc.once('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`the write-loop-delay process exited (${code}) without a result`));
    });
  });
}

import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { SendWr } from '@rdmajs/verbs';
import type { EchoPeer } from '../peers/EchoPeer.js';
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
  link?: 'tcp';
}

function opName(mode: 'send' | 'write', v: PingPongVariant): string {
  const base = mode === 'send' ? 'send-pingpong' : 'write-pingpong';
  const wait = v.wait === undefined ? '' : v.wait.spinUs === 0 ? '-events' : '-events-default-spin';
  return `${base}${wait}${v.link === 'tcp' ? '-link-tcp' : ''}`;
}

/**
 * Verbs ping-pong in the ib_send_lat / ib_write_lat style: both sides busy-poll.
 * `send`: SEND into the peer's posted receive, wait for its SEND back.
 * `write`: RDMA WRITE into the peer's buffer, wait for its WRITE back (last byte = sequence).
 */
export async function verbsPingPong(
  peer: EchoPeer,
  provider: Provider,
  mode: 'send' | 'write',
  size: number,
  iterations: number,
  warmup: number,
  variant: PingPongVariant = {},
): Promise<Result> {
  const { wait, link } = variant;
  if (wait !== undefined && mode !== 'send') throw new Error('event-driven rows are SEND rows');
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
      endpoint: me.qp.endpoint(),
      addr: me.mr.addr,
      rkey: me.mr.rkey,
      ...(wait === undefined ? {} : { wait }),
    });
    await ready;
    const rec = new LatencyRecorder();
    const deadline = new SpinDeadline(120_000, `${mode} ping-pong`);
    const bytes = me.mr.bytes;
    const { cq, qp, wcs } = me;
    const heap = new HeapMeter();
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
        while (bytes[size - 1] !== seq) deadline.check();
        cq.poll(wcs);
      }
      if (k >= warmup) rec.record((performance.now() - t0) * 1000);
      // Re-post the consumed receive outside the timed round trip (64 are posted).
      if (mode === 'send') qp.postRecv(recv);
    }
    const cpu = cpuNowUs() - cpu0;
    // Observer entries arrive asynchronously: let them in before reading the count.
    await new Promise((r) => setImmediate(r));
    const alloc = heap.stop(iterations);
    const { cpuUs: peerCpu } = await done;
    return {
      transport: provider,
      op: opName(mode, variant),
      sizeBytes: size,
      ...rec.summary(),
      cpuUsPerOp: cpu / iterations + peerCpu / total,
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
): Promise<Result> {
  const remote = await peer.call<VerbsSetup>({ op: 'verbs-setup', provider, bytes: size });
  const me = new VerbsSide(provider, size);
  try {
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
      deadline.check();
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu = cpuNowUs() - cpu0;
    const peerCpu = (await peer.call<number>({ op: 'cpu' })) - peerCpu0;
    return throughputResult(provider, 'write-throughput', size, count, seconds, cpu + peerCpu);
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
 * resolution), between two devices of this process. References in the same run: the best
 * plain Node does for the same bytes, one `Uint8Array.set` between the same buffers (it
 * holds the loop for the whole copy), and the loop left idle as long as the WRITE took (what
 * the machine alone adds: other processes on a shared host). Delays are the loop's stalls
 * beyond its 1 ms sampling interval, in µs; CPU is this process's (it is both ends).
 */
export async function verbsLoopDelay(provider: Provider, bytes: number): Promise<Result> {
  const a = new VerbsSide(provider, bytes);
  const b = new VerbsSide(provider, bytes);
  try {
    const size = Math.min(bytes, a.dev.info.limits.maxMsgSize);
    a.qp.connect(b.qp.endpoint());
    b.qp.connect(a.qp.endpoint());
    a.mr.bytes.fill(0x5a, 0, size); // touch every page first: page faults are not the point
    b.mr.bytes.fill(0, 0, size);
    const plain = await loopDelayDuring(async () => {
      b.mr.bytes.set(a.mr.bytes.subarray(0, size));
    });
    const cpu0 = cpuNowUs();
    const rdma = await loopDelayDuring(async () => {
      a.qp.postSend({
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList: [a.mr.sge(0, size)],
        remoteAddr: b.mr.addr,
        rkey: b.mr.rkey,
      });
      while (a.cq.poll(a.wcs, 1) === 0) await a.cq.waitForCompletion({ timeoutMs: 60_000 });
      const wc = a.wcs[0];
      if (wc?.status !== 'SUCCESS') throw new Error(`large WRITE: ${wc?.status}`);
    });
    const cpu = cpuNowUs() - cpu0;
    const idle = await loopDelayDuring(() => sleep(rdma.wallUs / 1000));
    return {
      transport: provider,
      op: 'write-loop-delay',
      sizeBytes: size,
      p50Us: rdma.p50Us,
      meanUs: rdma.meanUs,
      p99Us: rdma.p99Us,
      maxDelayUs: rdma.maxUs,
      cpuUsPerOp: cpu,
      gibPerSec: size / 2 ** 30 / (rdma.wallUs / 1e6),
      plainCopyMaxDelayUs: plain.maxUs,
      plainCopyGibPerSec: size / 2 ** 30 / (plain.wallUs / 1e6),
      idleMaxDelayUs: idle.maxUs,
      idleP99DelayUs: idle.p99Us,
    };
  } finally {
    a.close();
    b.close();
  }
}

interface LoopDelay {
  p50Us: number;
  meanUs: number;
  p99Us: number;
  maxUs: number;
  /** how long `work` took */
  wallUs: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The event loop's stalls while `work` runs, sampled every millisecond. */
async function loopDelayDuring(work: () => Promise<void>): Promise<LoopDelay> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await sleep(10); // samples under way before the work starts
  const t0 = performance.now();
  await work();
  const wallUs = (performance.now() - t0) * 1000;
  await sleep(10); // a stall that ended with `work` is recorded at the next sample
  h.disable();
  // The histogram holds the time between samples (ns): beyond 1 ms, the loop was held.
  const stall = (ns: number) => (Number.isFinite(ns) ? Math.max(0, ns / 1000 - 1000) : 0);
  return {
    p50Us: stall(h.percentile(50)),
    meanUs: stall(h.mean),
    p99Us: stall(h.percentile(99)),
    maxUs: stall(h.max),
    wallUs,
  };
}

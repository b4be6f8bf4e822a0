// The write-loop-delay cell, in a process of its own started for it: what a fresh process
// meets (its first registrations, pages never touched, V8's first reaction to them), not
// what the cells before it left behind. Sends one Result over IPC and exits.
import { PerformanceObserver } from 'node:perf_hooks';
import type { Result } from '../report/Result.js';
import { cpuNowUs } from '../stats/cpu.js';
import { loopStallsDuring } from '../stats/LoopStalls.js';
import { VerbsSide } from './VerbsSide.js';

const provider = (process.argv[2] ?? 'soft') as 'soft' | 'ibverbs';
const bytes = Number(process.argv[3] ?? 2 ** 30);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function main(): Promise<Result> {
  // Registration: two regions, synchronous calls (they map memory; no page is touched).
  const t0 = performance.now();
  const a = new VerbsSide(provider, bytes);
  const b = new VerbsSide(provider, bytes);
  const registerUs = (performance.now() - t0) * 1000;
  try {
    const size = Math.min(bytes, a.dev.info.limits.maxMsgSize);
    a.qp.connect(b.qp.endpoint());
    b.qp.connect(a.qp.endpoint());
    // The application builds its message: its own writes, its own page faults, on its own
    // thread (what any JS writing 1 GiB costs). The destination stays untouched.
    const f0 = performance.now();
    a.mr.bytes.fill(0x5a, 0, size);
    const fillUs = (performance.now() - f0) * 1000;
    const write = async () => {
      a.qp.postSend({
        wrId: 1,
        opcode: 'RDMA_WRITE',
        sgList: [a.mr.sge(0, size)],
        remoteAddr: b.mr.addr,
        rkey: b.mr.rkey,
      });
      while (a.cq.poll(a.wcs, 1) === 0) await a.cq.waitForCompletion({ timeoutMs: 600_000 });
      const wc = a.wcs[0];
      if (wc?.status !== 'SUCCESS') throw new Error(`large WRITE: ${wc?.status}`);
    };
    const gcs: number[] = [];
    const obs = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) gcs.push(e.duration * 1000);
    });
    obs.observe({ entryTypes: ['gc'] });
    const cpu0 = cpuNowUs();
    // The first WRITE: every destination page is met for the first time inside the copy.
    const first = await loopStallsDuring(write);
    const cpu = cpuNowUs() - cpu0;
    await sleep(0);
    obs.disconnect();
    const warm = await loopStallsDuring(write);
    // References: plain Node's best for the same bytes (one Uint8Array.set holds the loop
    // for the whole copy), and the loop left idle, up to 2 s (what the host alone adds).
    const plain = await loopStallsDuring(async () => {
      b.mr.bytes.set(a.mr.bytes.subarray(0, size));
    });
    const idle = await loopStallsDuring(() => sleep(Math.min(first.wallUs / 1000, 2000)));
    return {
      transport: provider,
      op: 'write-loop-delay',
      sizeBytes: size,
      p50Us: first.p50Us,
      meanUs: first.meanUs,
      p99Us: first.p99Us,
      maxDelayUs: first.maxUs,
      cpuHeldMaxUs: first.cpuHeldMaxUs,
      cpuUsPerOp: cpu,
      gibPerSec: size / 2 ** 30 / (first.wallUs / 1e6),
      gcDuringWrite: gcs.length,
      gcMaxPauseUs: gcs.length ? Math.max(...gcs) : 0,
      warmP50Us: warm.p50Us,
      warmP99Us: warm.p99Us,
      warmMaxDelayUs: warm.maxUs,
      warmCpuHeldMaxUs: warm.cpuHeldMaxUs,
      warmGibPerSec: size / 2 ** 30 / (warm.wallUs / 1e6),
      registerUs,
      fillUs,
      plainCopyMaxDelayUs: plain.maxUs,
      plainCopyGibPerSec: size / 2 ** 30 / (plain.wallUs / 1e6),
      idleMaxDelayUs: idle.maxUs,
      idleP99DelayUs: idle.p99Us,
      idleCpuHeldMaxUs: idle.cpuHeldMaxUs,
    };
  } finally {
    a.close();
    b.close();
  }
}

main().then(
  (result) => process.send?.({ result }, () => process.exit(0)),
  (err: Error) => process.send?.({ error: err.message }, () => process.exit(1)),
);

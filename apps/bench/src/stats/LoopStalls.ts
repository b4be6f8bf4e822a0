import { monitorEventLoopDelay } from 'node:perf_hooks';

/** The event loop's stalls while some work ran, in µs beyond the 1 ms sampling interval. */
export interface LoopStalls {
  p50Us: number;
  meanUs: number;
  p99Us: number;
  maxUs: number;
  /** how long the work took */
  wallUs: number;
  /**
   * The most CPU time the process used between two 1 ms ticks of the loop: a bound on what
   * the code held the loop for (every thread counts, so it may overstate, never understate).
   * A stall spent off the CPU (a shared host ran other processes) shows in maxUs, not here.
   */
  cpuHeldMaxUs: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The event loop's stalls while `work` runs, sampled every millisecond. */
export async function loopStallsDuring(work: () => Promise<void>): Promise<LoopStalls> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  // getrusage, exact to the microsecond for running threads (a thread's own schedstat is
  // only as fresh as its last scheduler tick).
  const cpuUs = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  let cpuHeldMaxUs = 0;
  let last = cpuUs();
  const tick = setInterval(() => {
    const now = cpuUs();
    cpuHeldMaxUs = Math.max(cpuHeldMaxUs, now - last);
    last = now;
  }, 1);
  h.enable();
  await sleep(10); // samples under way before the work starts
  cpuHeldMaxUs = 0;
  const t0 = performance.now();
  await work();
  const wallUs = (performance.now() - t0) * 1000;
  await sleep(10); // a stall that ended with `work` is recorded at the next sample
  h.disable();
  clearInterval(tick);
  // The histogram holds the time between samples (ns): beyond 1 ms, the loop was held.
  const stall = (ns: number) => (Number.isFinite(ns) ? Math.max(0, ns / 1000 - 1000) : 0);
  return {
    p50Us: stall(h.percentile(50)),
    meanUs: stall(h.mean),
    p99Us: stall(h.percentile(99)),
    maxUs: stall(h.max),
    wallUs,
    cpuHeldMaxUs,
  };
}

import { LatencyRecorder } from '../../stats/LatencyRecorder.js';

export interface IncastOptions {
  /** Logical clients pushing at once (the fan-in). */
  concurrency: number;
  bursts: number;
  /** Pause after each burst, ms. */
  gapMs: number;
}

export interface IncastRun {
  /** Each acknowledged push, from its burst's start (every round's, when given). */
  latency: LatencyRecorder;
  failed: number;
  /** Time bursts were in flight (gaps excluded), ms. */
  busyMs: number;
  seconds: number;
}

/**
 * Bursty incast: `concurrency` logical clients push at the same moment (as data-parallel
 * workers do after a step); the next burst starts once every push of this one is settled,
 * after a short gap. `push(b, w)` is writer `w`'s push of burst `b`.
 */
export async function runIncast(
  push: (burst: number, writer: number) => Promise<void>,
  o: IncastOptions,
  /** Where latencies go: a row measured in several rounds records them all into one. */
  latency = new LatencyRecorder(),
): Promise<IncastRun> {
  let failed = 0;
  let busyMs = 0;
  const t0 = performance.now();
  for (let b = 0; b < o.bursts; b++) {
    const start = performance.now();
    await Promise.all(
      Array.from({ length: o.concurrency }, (_, w) =>
        push(b, w).then(
          () => latency.record((performance.now() - start) * 1000),
          () => failed++,
        ),
      ),
    );
    busyMs += performance.now() - start;
    await new Promise((r) => setTimeout(r, o.gapMs));
  }
  return { latency, failed, busyMs, seconds: (performance.now() - t0) / 1000 };
}

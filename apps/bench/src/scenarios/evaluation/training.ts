import type { Result } from '../../report/Result.js';
import { collectGarbage } from '../../stats/collectGarbage.js';
import { LatencyRecorder } from '../../stats/LatencyRecorder.js';
import { EVAL_DIM, type PsTarget } from './PsTarget.js';
import { ZipfKeys } from './ZipfKeys.js';

export interface TrainingOptions {
  /** Logical clients pushing at once (the incast fan-in). */
  concurrency: readonly number[];
  keysPerPush: number;
  /** Pushes measured per cell (at least two bursts). */
  samples: number;
  keySpace: number;
  zipfExponent: number;
}

const nameOf = (t: PsTarget) =>
  t.variant === undefined ? t.transport : `${t.transport} ${t.variant}`;

/** The fan-in the headline incast ratio is read at. */
export const HEADLINE_CONCURRENCY = 64;
const DISTINCT_BATCHES = 32;
const GAP_MS = 2;

/**
 * Training push, bursty incast: `c` logical clients push a gradient batch each at the same
 * moment (as data-parallel workers do after a step), all to the same shards; the next burst
 * starts once every push of this one is acknowledged, after a short gap. Latency is per push,
 * from the burst's start. Hot keys repeat across clients (Zipf), as shared embeddings do.
 */
export async function runTraining(
  targets: readonly PsTarget[],
  o: TrainingOptions,
  progress: (label: string) => void,
): Promise<Result[]> {
  const zipf = new ZipfKeys(o.keySpace, o.zipfExponent, 4242);
  const batches = Array.from({ length: DISTINCT_BATCHES }, () =>
    zipf.fill(new BigUint64Array(o.keysPerPush)),
  );
  const grads = new Float32Array(o.keysPerPush * EVAL_DIM).fill(0.001);
  const results: Result[] = [];
  for (const t of targets) {
    progress(`training warm-up (${nameOf(t)})`);
    for (let k = 0; k < 100; k++)
      await t.push(batches[k % DISTINCT_BATCHES] as BigUint64Array, grads, 0);
  }
  for (const [ci, c] of o.concurrency.entries()) {
    const bursts = Math.max(2, Math.ceil(o.samples / c));
    const order = targets.map((_, i) => targets[(i + ci) % targets.length] as PsTarget);
    for (const t of order) {
      progress(`training incast ${nameOf(t)}, ${c} clients × ${bursts} bursts`);
      const rec = new LatencyRecorder();
      let failed = 0;
      collectGarbage(); // the previous row's garbage is not collected inside this one
      const cpu0 = t.cpuUs();
      const t0 = performance.now();
      let busyMs = 0;
      for (let b = 0; b < bursts; b++) {
        const start = performance.now();
        await Promise.all(
          Array.from({ length: c }, (_, w) =>
            t.push(batches[(b * c + w) % DISTINCT_BATCHES] as BigUint64Array, grads, w).then(
              () => rec.record((performance.now() - start) * 1000),
              () => failed++,
            ),
          ),
        );
        busyMs += performance.now() - start;
        await new Promise((r) => setTimeout(r, GAP_MS));
      }
      const seconds = (performance.now() - t0) / 1000;
      const op = `push-incast×${c}`;
      results.push({
        transport: t.transport,
        op: t.variant === undefined ? op : `${op} ${t.variant}`,
        baselineOp: op,
        sizeBytes: o.keysPerPush * EVAL_DIM * 4,
        concurrency: c,
        ...rec.summary(),
        cpuUsPerOp: (t.cpuUs() - cpu0) / Math.max(1, rec.count),
        pushesPerSec: rec.count / (busyMs / 1000),
        failed,
        seconds,
        rssBytes: t.rssBytes(),
      });
    }
  }
  return results;
}

import type { Result } from '../../report/Result.js';
import { BatchMix, INFERENCE_BATCHES } from './BatchMix.js';
import { runOpenLoop } from './openLoop.js';
import { EVAL_DIM, type PsTarget } from './PsTarget.js';
import { ZipfKeys } from './ZipfKeys.js';

export interface InferenceOptions {
  /** Offered loads as fractions of the TCP target's closed-loop capacity. */
  loads: readonly number[];
  durationMs: number;
  /** Pre-drawn requests cycled through (so drawing keys costs nothing while measuring). */
  requests: number;
  keySpace: number;
  zipfExponent: number;
}

/** The load the headline ratios are read at: busy, not saturated. */
export const HEADLINE_LOAD = 0.5;
const MAX_OUTSTANDING = 256;
const PROBE_MS = 1500;
const PROBE_CONCURRENCY = 16;

/** A pool of requests: batch sizes from the mix, keys with Zipf popularity, seeded. */
export function drawRequests(o: InferenceOptions, seed: number): BigUint64Array[] {
  const mix = new BatchMix(INFERENCE_BATCHES, seed);
  const zipf = new ZipfKeys(o.keySpace, o.zipfExponent, seed + 1);
  return Array.from({ length: o.requests }, () =>
    zipf.fill(new BigUint64Array((INFERENCE_BATCHES[mix.draw()] as { keys: number }).keys)),
  );
}

/** Closed-loop capacity (requests per second) of a target at a fixed concurrency. */
async function capacity(target: PsTarget, requests: BigUint64Array[]): Promise<number> {
  let k = 0;
  let done = 0;
  const end = performance.now() + PROBE_MS;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: PROBE_CONCURRENCY }, async () => {
      while (performance.now() < end) {
        await target.pull(requests[k++ % requests.length] as BigUint64Array);
        done++;
      }
    }),
  );
  return done / ((performance.now() - t0) / 1000);
}

/**
 * Inference fetch: open-loop pulls at several offered loads, the same loads (requests per
 * second) for every target, each load measured on every target back to back in a rotating
 * order so a burst of machine noise does not land on one side only.
 */
export async function runInference(
  targets: readonly PsTarget[],
  o: InferenceOptions,
  progress: (label: string) => void,
): Promise<Result[]> {
  const requests = drawRequests(o, 20261204);
  const meanKeys = requests.reduce((a, r) => a + r.length, 0) / requests.length;
  const sizeBytes = Math.round(meanKeys) * EVAL_DIM * 4;
  for (const t of targets) {
    progress(`inference warm-up (${t.transport})`);
    for (let k = 0; k < 300; k++) await t.pull(requests[k % requests.length] as BigUint64Array);
  }
  const reference = targets.find((t) => t.transport === 'tcp') ?? (targets[0] as PsTarget);
  progress('inference capacity probe (tcp)');
  const tcpCapacity = await capacity(reference, requests);
  const results: Result[] = [];
  for (const [li, load] of o.loads.entries()) {
    const rate = Math.max(1, Math.round(load * tcpCapacity));
    const order = targets.map((_, i) => targets[(i + li) % targets.length] as PsTarget);
    for (const t of order) {
      progress(`inference fetch ${t.transport} at ${Math.round(load * 100)} % (${rate} req/s)`);
      const cpu0 = t.cpuUs();
      const r = await runOpenLoop((k) => t.pull(requests[k % requests.length] as BigUint64Array), {
        rate,
        durationMs: o.durationMs,
        maxOutstanding: MAX_OUTSTANDING,
        seed: 7 + li,
      });
      const cpu = t.cpuUs() - cpu0;
      const op = `fetch@${Math.round(load * 100)}%`;
      results.push({
        transport: t.transport,
        op,
        baselineOp: op,
        sizeBytes,
        meanKeys,
        ...r.latency.summary(),
        cpuUsPerOp: r.completed > 0 ? cpu / r.completed : Number.NaN,
        offeredRps: rate,
        achievedRps: r.completed / r.seconds,
        tcpCapacityRps: tcpCapacity,
        dropped: r.dropped,
        failed: r.failed,
        lagP99Us: r.lag.summary().p99Us,
        rssBytes: t.rssBytes(),
      });
    }
  }
  return results;
}

// Model-based fuzzing of flowctl's public surface (issue 17): see fuzz/flowctlModel.ts.
// FUZZ_RUNS=N runs N sequences per batch (default 500); FUZZ_SEED fixes the first batch's seed.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { coverage, flowctlProperty, fuzzRuns } from './fuzz/flowctlModel.js';

const RUNS = fuzzRuns(500);
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
/**
 * A batch of 500 misses a rare outcome now and then (measured over 200 seeds: an abort of a
 * queued wait in 22, an overrun in 1). The coverage check is about the generator, not the
 * code, so further batches (seeds SEED+1, …) run until every outcome was reached (a miss in
 * all 6: ≈ 0.11^6); each batch must pass.
 */
const MAX_BATCHES = 6;

const REQUIRED = [
  'tryAcquire granted',
  'tryAcquire refused',
  'window wait queued',
  'window wait granted',
  'window release',
  'credit wait granted',
  'credit acquire pending',
  'credits returned',
  'overrun',
  'wait ERR_FLOWCTL_DEADLINE',
  'wait ERR_FLOWCTL_CLOSED',
  'wait ERR_FLOWCTL_QUEUE_FULL',
  // A waiter taken out of the queue by its deadline or its signal (not rejected at once).
  'queued wait ERR_FLOWCTL_DEADLINE',
  'queued wait ERR_FLOWCTL_ABORTED',
  'throw ERR_FLOWCTL_INVALID_ARG',
  'throw ERR_FLOWCTL_TOO_LARGE',
  'throw ERR_FLOWCTL_CLOSED',
  'throw ERR_FLOWCTL_PROTOCOL',
];

const count = (what: string): number => coverage.get(what) ?? 0;
const covered = (): boolean => REQUIRED.every((what) => count(what) > 0);

describe('flowctl model-based fuzz', () => {
  it(`${RUNS} random call sequences per batch on a ManualClock agree with the model`, async () => {
    coverage.clear();
    for (let batch = 0; batch < MAX_BATCHES && (batch === 0 || !covered()); batch++)
      await fc.assert(flowctlProperty(40), { numRuns: RUNS, seed: SEED + batch });
    for (const what of REQUIRED) expect(count(what), `${what} (seed ${SEED})`).toBeGreaterThan(0);
  }, 600_000);
});

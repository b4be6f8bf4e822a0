// Model-based fuzzing of flowctl's public surface (issue 17): see fuzz/flowctlModel.ts.
// FUZZ_RUNS=N runs N sequences per batch (default 500); FUZZ_SEED fixes the first batch's seed.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { coverage, flowctlProperty, fuzzRuns } from './fuzz/flowctlModel.js';

const RUNS = fuzzRuns(500);
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);
/**
 * A batch of 500 misses a rare outcome about once in a hundred seeds (measured over 200 seeds:
 * no abort in 1, no overrun in 1). The coverage check is about the generator, not the code, so
 * further batches (seeds SEED+1, …) run until every outcome was reached; each batch must pass.
 */
const MAX_BATCHES = 4;

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
  'throw ERR_FLOWCTL_INVALID_ARG',
  'throw ERR_FLOWCTL_TOO_LARGE',
  'throw ERR_FLOWCTL_CLOSED',
  'throw ERR_FLOWCTL_PROTOCOL',
];
/** An abort rejected a queued wait, or an acquire whose signal had already fired. */
const ABORTS = [
  'wait ERR_FLOWCTL_ABORTED',
  'credit acquire ERR_FLOWCTL_ABORTED',
  'window acquire ERR_FLOWCTL_ABORTED',
];

const count = (what: string): number => coverage.get(what) ?? 0;
const covered = (): boolean =>
  REQUIRED.every((what) => count(what) > 0) && ABORTS.some((what) => count(what) > 0);

describe('flowctl model-based fuzz', () => {
  it(`${RUNS} random call sequences per batch on a ManualClock agree with the model`, async () => {
    coverage.clear();
    for (let batch = 0; batch < MAX_BATCHES && (batch === 0 || !covered()); batch++)
      await fc.assert(flowctlProperty(40), { numRuns: RUNS, seed: SEED + batch });
    for (const what of REQUIRED) expect(count(what), `${what} (seed ${SEED})`).toBeGreaterThan(0);
    const aborts = ABORTS.reduce((sum, what) => sum + count(what), 0);
    expect(aborts, `aborts (seed ${SEED})`).toBeGreaterThan(0);
  }, 600_000);
});

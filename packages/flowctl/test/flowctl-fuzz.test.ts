// Model-based fuzzing of flowctl's public surface (issue 17): see fuzz/flowctlModel.ts.
// FUZZ_RUNS=N runs N sequences (default 500); FUZZ_SEED fixes the seed.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { coverage, flowctlProperty, fuzzRuns } from './fuzz/flowctlModel.js';

const RUNS = fuzzRuns(500);
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);

describe('flowctl model-based fuzz', () => {
  it(`${RUNS} random call sequences on a ManualClock agree with the model`, async () => {
    coverage.clear();
    await fc.assert(flowctlProperty(40), { numRuns: RUNS, seed: SEED });
    for (const what of [
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
    ]) {
      expect(coverage.get(what) ?? 0, what).toBeGreaterThan(0);
    }
    // An abort rejected a queued wait, or one whose signal had already fired.
    const aborts =
      (coverage.get('wait ERR_FLOWCTL_ABORTED') ?? 0) +
      (coverage.get('credit acquire ERR_FLOWCTL_ABORTED') ?? 0);
    expect(aborts).toBeGreaterThan(0);
  }, 600_000);
});

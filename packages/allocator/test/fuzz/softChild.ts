// Child process of allocator-fuzz.test.ts: the model-based sequences against the real soft
// verbs PD, so that a native abort is reported (with its seed) instead of killing vitest.
// FUZZ_SEED and FUZZ_SOFT_RUNS come from the parent; prints one JSON line.
import { openDevice } from '@rdmajs/verbs';
import fc from 'fast-check';
import { verbsRegistrar } from '../../src/index.js';
import { allocatorProperty, type FuzzEnv } from './allocatorModel.js';

let runs = 0;
function softEnv(): FuzzEnv {
  const dev = openDevice({ provider: 'soft' });
  const pd = dev.allocPd();
  const viaDevice = runs++ % 2 === 0;
  return {
    registrar: () => verbsRegistrar(pd),
    // The allocator must notice on its own: through verbsRegistrar's `closed` (pd.closed).
    closeRegistrar: () => (viaDevice ? dev.close() : pd.close()),
    cleanup: () => dev.close(),
  };
}

const seed = Number(process.env.FUZZ_SEED);
const numRuns = Number(process.env.FUZZ_SOFT_RUNS ?? 40);
const details = fc.check(allocatorProperty(softEnv, 30, 2 * 1024 * 1024 + 4096), { seed, numRuns });
process.stdout.write(
  `${JSON.stringify({
    failed: details.failed,
    numRuns: details.numRuns,
    seed: details.seed,
    path: details.counterexamplePath,
    error: details.failed
      ? String((details.errorInstance as Error | undefined)?.message ?? details.errorInstance)
      : undefined,
  })}\n`,
);
process.exitCode = details.failed ? 1 : 0;

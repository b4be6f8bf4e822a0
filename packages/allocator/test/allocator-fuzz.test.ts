// Model-based fuzzing of the allocator's public surface (issue 17): see fuzz/allocatorModel.ts.
// FUZZ_RUNS=N runs N sequences in-process (default 300) and N/5 against the soft PD.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FakeRegistrar } from './fakes/FakeRegistrar.js';
import { allocatorProperty, coverage, type FuzzEnv, fuzzRuns } from './fuzz/allocatorModel.js';

const RUNS = fuzzRuns(300);
const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31);

function fakeEnv(): FuzzEnv {
  return {
    registrar: () => new FakeRegistrar(),
    closeRegistrar: (harness) => harness.close(),
    cleanup: () => {},
  };
}

describe('allocator model-based fuzz', () => {
  it(`${RUNS} random call sequences against a fake registrar agree with the model`, () => {
    coverage.clear();
    fc.assert(allocatorProperty(fakeEnv, 40, 3 * 1024 * 1024), { numRuns: RUNS, seed: SEED });
    // The sequences reached every path and every error, not only the easy cases.
    for (const what of [
      'alloc small',
      'alloc large',
      'alloc dedicated',
      'release',
      'release revoked (no-op)',
      'last release closes',
      'registrar closed under live blocks',
      'acquire',
      'cache invalidate',
      'ERR_ALLOC_INVALID_ARG',
      'ERR_ALLOC_LIMIT',
      'ERR_ALLOC_DOUBLE_RELEASE',
      'ERR_ALLOC_USE_AFTER_RELEASE',
      'ERR_ALLOC_FOREIGN_BLOCK',
      'ERR_ALLOC_CLOSED',
      'ERR_ALLOC_REGISTRATION',
    ]) {
      expect(coverage.get(what) ?? 0, what).toBeGreaterThan(0);
    }
  }, 600_000);

  it('sequences against the real soft PD, in a child process (an abort is a failure with its seed)', () => {
    const child = fileURLToPath(new URL('./fuzz/softChild.ts', import.meta.url));
    const softRuns = Math.max(20, Math.floor(RUNS / 5));
    const out = spawnSync(
      process.execPath,
      ['--conditions=@rdmajs/source', '--import', 'tsx', child],
      {
        encoding: 'utf8',
        env: { ...process.env, FUZZ_SEED: String(SEED), FUZZ_SOFT_RUNS: String(softRuns) },
        timeout: 600_000,
      },
    );
    const report = `seed ${SEED}, status ${out.status}, signal ${out.signal}\n${out.stdout}\n${out.stderr}`;
    expect(out.signal, report).toBeNull();
    expect(out.status, report).toBe(0);
    const result = JSON.parse(out.stdout.trim().split('\n').pop() ?? '{}') as {
      failed: boolean;
      numRuns: number;
    };
    expect(result, report).toMatchObject({ failed: false, numRuns: softRuns });
  }, 600_000);
});

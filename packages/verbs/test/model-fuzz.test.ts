// Runs the model-based fuzz of the public API (test/fuzz/verbs-model.ts) in its own
// process: an abort or a hang there is a failure here, reported with the seed.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { ibverbsStatus } from '../src/index.js';
import { providers } from './harness/pair.js';

const script = fileURLToPath(new URL('./fuzz/verbs-model.ts', import.meta.url));

interface Report {
  runs: number;
  calls: number;
  seed: number;
  failed: boolean;
  counterexample?: string;
  error?: string;
}

function runFuzz(
  env: Record<string, string>,
  deadlineMs: number,
): Promise<{ code: number | null; signal: string | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c;
    });
    child.stderr.on('data', (c: Buffer) => {
      err += c;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), deadlineMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out, err });
    });
  });
}

// The model is of the soft provider on a host without RDMA devices (what 'auto' opens).
const softOnly = providers.includes('soft') && ibverbsStatus().devices.length === 0;

it.runIf(softOnly)(
  'random call sequences with hostile arguments: typed errors only, model and objects agree',
  async () => {
    const runs = process.env.FUZZ_RUNS ?? '300';
    const seed = process.env.FUZZ_SEED ?? String(Date.now() % 2 ** 31);
    const r = await runFuzz({ FUZZ_RUNS: runs, FUZZ_SEED: seed }, 100_000);
    const line = r.out.trim().split('\n').pop() ?? '';
    // An abort (signal or no report) names the seed that reproduces it.
    expect(r.signal, `fuzz process died (seed ${seed}): ${r.err.slice(-2000)}`).toBeNull();
    expect(line, `no report (seed ${seed}): ${r.err.slice(-2000)}`).toMatch(/^\{/);
    const report = JSON.parse(line) as Report;
    expect(report.failed, `seed ${report.seed}: ${report.counterexample}\n${report.error}`).toBe(
      false,
    );
    expect(report.runs).toBe(Number(runs));
    expect(report.calls).toBeGreaterThan(report.runs); // sequences really ran calls
    expect(r.code).toBe(0);
  },
  120_000,
);

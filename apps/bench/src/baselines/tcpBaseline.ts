import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Result } from '../report/Result.js';

/** One size measured by the standalone script `baselines/tcp-pingpong.mjs`. */
export interface BaselineRow {
  sizeBytes: number;
  iterations: number;
  p50Us: number;
  meanUs: number;
  p99Us: number;
}

/** Bench and script p50s may differ by at most this factor, either way. */
export const BASELINE_TOLERANCE = 1.2;

const script = fileURLToPath(new URL('../../baselines/tcp-pingpong.mjs', import.meta.url));

function isRow(r: unknown): r is BaselineRow {
  const o = r as Record<string, unknown>;
  return (
    typeof o === 'object' &&
    o !== null &&
    ['sizeBytes', 'iterations', 'p50Us', 'meanUs', 'p99Us'].every(
      (k) => typeof o[k] === 'number' && Number.isFinite(o[k]),
    )
  );
}

/** Runs the plain-Node script with plain `node` (no tsx), counts given per size. */
export function runTcpBaseline(
  sizes: number[],
  iterations: number[],
  warmup: number[],
): Promise<BaselineRow[]> {
  const args = [script, '--sizes', sizes.join(','), '--iterations', iterations.join(',')];
  args.push('--warmup', warmup.join(','));
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      args,
      { timeout: 300_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`baseline script failed: ${stderr || err.message}`));
        try {
          const rows: unknown = JSON.parse(stdout).results;
          if (!Array.isArray(rows) || !rows.every(isRow)) throw new Error('unexpected shape');
          resolve(rows);
        } catch (e) {
          reject(new Error(`baseline script printed bad JSON: ${(e as Error).message}`));
        }
      },
    );
  });
}

export interface BaselineComparison {
  sizeBytes: number;
  benchP50Us: number;
  scriptP50Us: number;
  /** bench ÷ script. */
  ratio: number;
  ok: boolean;
}

/** Pairs the bench's `tcp/pingpong` rows with the script's rows of the same size. */
export function compareBaselines(
  bench: Result[],
  script: BaselineRow[],
  tolerance = BASELINE_TOLERANCE,
): BaselineComparison[] {
  return script.map((s) => {
    const b = bench.find(
      (r) => r.transport === 'tcp' && r.op === 'pingpong' && r.sizeBytes === s.sizeBytes,
    );
    if (!b) throw new Error(`the bench has no tcp/pingpong row for ${s.sizeBytes} B`);
    const ratio = b.p50Us / s.p50Us;
    return {
      sizeBytes: s.sizeBytes,
      benchP50Us: b.p50Us,
      scriptP50Us: s.p50Us,
      ratio,
      ok: ratio <= tolerance && ratio >= 1 / tolerance,
    };
  });
}

/** One line per size: both p50s and bench ÷ script. */
export function renderComparison(rows: BaselineComparison[]): string {
  const lines = ['baseline check: bench tcp/pingpong p50 vs plain-Node script p50'];
  for (const r of rows) {
    lines.push(
      `  ${String(r.sizeBytes).padStart(8)} B  bench ${r.benchP50Us.toFixed(1)} µs  script ${r.scriptP50Us.toFixed(1)} µs  ratio ${r.ratio.toFixed(2)}×  ${r.ok ? 'ok' : 'OUT OF RANGE'}`,
    );
  }
  return lines.join('\n');
}

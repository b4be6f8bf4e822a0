import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

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
  /** Median over the rounds of the bench's tcp/pingpong p50. */
  benchP50Us: number;
  /** Median over the rounds of the script's p50. */
  scriptP50Us: number;
  /** Each round's p50, in run order. */
  benchRoundsP50Us: number[];
  scriptRoundsP50Us: number[];
  /** bench ÷ script, of the medians. */
  ratio: number;
  ok: boolean;
}

/** One size's interleaved rounds: the bench's p50 and the script's p50 of each round. */
export interface BaselineRounds {
  sizeBytes: number;
  bench: number[];
  script: number[];
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) throw new Error('median of no samples');
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1
    ? (s[mid] as number)
    : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** Compares the medians of each size's rounds; a ratio beyond `tolerance` either way fails. */
export function compareBaselines(
  rounds: BaselineRounds[],
  tolerance = BASELINE_TOLERANCE,
): BaselineComparison[] {
  return rounds.map((r) => {
    const benchP50Us = median(r.bench);
    const scriptP50Us = median(r.script);
    const ratio = benchP50Us / scriptP50Us;
    return {
      sizeBytes: r.sizeBytes,
      benchP50Us,
      scriptP50Us,
      benchRoundsP50Us: r.bench,
      scriptRoundsP50Us: r.script,
      ratio,
      ok: ratio <= tolerance && ratio >= 1 / tolerance,
    };
  });
}

/** One line per size: both median p50s and bench ÷ script. */
export function renderComparison(rows: BaselineComparison[]): string {
  const n = rows[0]?.benchRoundsP50Us.length ?? 0;
  const lines = [
    `baseline check: bench tcp/pingpong p50 vs plain-Node script p50, medians of ${n} interleaved rounds`,
  ];
  for (const r of rows) {
    lines.push(
      `  ${String(r.sizeBytes).padStart(8)} B  bench ${r.benchP50Us.toFixed(1)} µs  script ${r.scriptP50Us.toFixed(1)} µs  ratio ${r.ratio.toFixed(2)}×  ${r.ok ? 'ok' : 'OUT OF RANGE'}`,
    );
  }
  return lines.join('\n');
}

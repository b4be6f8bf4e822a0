import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
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

const ROUND_TIMEOUT_MS = 180_000;

/**
 * The plain-Node script kept running in `--serve` mode (plain `node`, no tsx): one process
 * and echo peer for every round, so rounds can alternate with the bench's own.
 */
export class ScriptBaseline {
  readonly #proc: ChildProcess;
  readonly #lines: AsyncIterator<string>;
  #stderr = '';

  private constructor(proc: ChildProcess) {
    this.#proc = proc;
    proc.stderr?.on('data', (d: Buffer) => {
      this.#stderr = (this.#stderr + d.toString()).slice(-4096);
    });
    this.#lines = createInterface({ input: proc.stdout as Readable })[Symbol.asyncIterator]();
  }

  static start(): ScriptBaseline {
    return new ScriptBaseline(
      spawn(process.execPath, [script, '--serve'], { stdio: ['pipe', 'pipe', 'pipe'] }),
    );
  }

  /** One round: `warmup` unmeasured then `iterations` measured round trips of `size` bytes. */
  async measure(size: number, iterations: number, warmup: number): Promise<BaselineRow> {
    this.#proc.stdin?.write(`${JSON.stringify({ size, iterations, warmup })}\n`);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`baseline script: no answer in ${ROUND_TIMEOUT_MS} ms`)),
        ROUND_TIMEOUT_MS,
      );
    });
    try {
      const next = await Promise.race([this.#lines.next(), timeout]);
      if (next.done) throw new Error(`baseline script exited: ${this.#stderr.trim()}`);
      let row: unknown;
      try {
        row = JSON.parse(next.value);
      } catch {
        throw new Error(`baseline script printed bad JSON: ${next.value.slice(0, 200)}`);
      }
      const err = (row as { error?: unknown } | null)?.error;
      if (typeof err === 'string') throw new Error(`baseline script: ${err}`);
      if (!isRow(row) || row.sizeBytes !== size)
        throw new Error(`baseline script: unexpected answer ${next.value.slice(0, 200)}`);
      return row;
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    if (this.#proc.exitCode !== null || this.#proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => this.#proc.once('exit', () => r()));
    this.#proc.stdin?.end();
    const t = setTimeout(() => this.#proc.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(t);
  }
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
  /** Median over the rounds of bench ÷ script, each round's pair measured back to back. */
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

/**
 * Per size: the median of the rounds' bench ÷ script ratios (each pair ran back to back,
 * so they met the same load) must lie within `tolerance` either way.
 */
export function compareBaselines(
  rounds: BaselineRounds[],
  tolerance = BASELINE_TOLERANCE,
): BaselineComparison[] {
  return rounds.map((r) => {
    if (r.bench.length !== r.script.length || r.bench.length === 0)
      throw new Error(`baseline rounds of ${r.sizeBytes} B: unpaired`);
    const benchP50Us = median(r.bench);
    const scriptP50Us = median(r.script);
    const ratio = median(r.bench.map((b, k) => b / (r.script[k] as number)));
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
    `baseline check: bench tcp/pingpong p50 vs plain-Node script p50 over ${n} interleaved rounds (median p50s; ratio = median of the rounds' ratios)`,
  ];
  for (const r of rows) {
    lines.push(
      `  ${String(r.sizeBytes).padStart(8)} B  bench ${r.benchP50Us.toFixed(1)} µs  script ${r.scriptP50Us.toFixed(1)} µs  ratio ${r.ratio.toFixed(2)}×  ${r.ok ? 'ok' : 'OUT OF RANGE'}`,
    );
  }
  return lines.join('\n');
}

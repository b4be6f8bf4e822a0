/** Structured logs: one JSON object per line. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface Logger {
  log(level: LogLevel, msg: string, fields?: Record<string, unknown>): void;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Writes `{"time","level","msg",...fields}` lines to `out` (default stderr) at `level` and above. */
export function jsonLogger(
  options: { level?: LogLevel; out?: (line: string) => void; base?: Record<string, unknown> } = {},
): Logger {
  const min = RANK[options.level ?? 'info'];
  const out = options.out ?? ((line: string) => process.stderr.write(line));
  const base = options.base ?? {};
  return {
    log(level, msg, fields = {}) {
      if (RANK[level] < min) return;
      out(
        `${JSON.stringify({ time: new Date().toISOString(), level, msg, ...base, ...fields }, errorsAsObjects)}\n`,
      );
    },
  };
}

/** A logger that drops everything. */
export const silentLogger: Logger = { log() {} };

function errorsAsObjects(_key: string, value: unknown): unknown {
  if (value instanceof Error) {
    return { name: value.name, code: (value as { code?: unknown }).code, message: value.message };
  }
  if (typeof value === 'bigint') return value.toString();
  return value;
}

import { formatSize } from './format.js';
import { HEADLINES } from './paper.js';
import type { Report, Result } from './Result.js';

const key = (r: Result) => `${r.transport}/${r.op}/${r.sizeBytes}`;

function isReport(x: unknown): x is Report {
  const o = x as Partial<Report> | null;
  return (
    typeof o === 'object' &&
    o !== null &&
    typeof o.scenario === 'string' &&
    Array.isArray(o.results) &&
    o.results.every(
      (r) =>
        typeof r === 'object' &&
        r !== null &&
        typeof r.transport === 'string' &&
        typeof r.op === 'string' &&
        typeof r.sizeBytes === 'number',
    )
  );
}

/** Parses an earlier `--json` file; throws with the reason when it is not one. */
export function parseReport(text: string, file: string): Report {
  let x: unknown;
  try {
    x = JSON.parse(text);
  } catch (e) {
    throw new Error(`${file}: not JSON (${(e as Error).message})`);
  }
  if (!isReport(x)) throw new Error(`${file}: not an rdmajs-bench --json report`);
  return x;
}

const change = (now: number, then: unknown): string => {
  if (typeof then !== 'number' || !(then > 0) || !Number.isFinite(now)) return '—';
  const pct = (now / then - 1) * 100;
  return `${pct >= 0 ? '+' : ''}${pct.toFixed(1)} %`;
};

/** Row by row (matched on transport, op and size): p50, p99 and CPU per op, then → now. */
export function renderCompare(old: Report, now: Report): string {
  const lines = [`change against the earlier run (${old.scenario}; negative = lower now)`];
  if (old.scenario !== now.scenario)
    lines.push(`  note: the earlier run is of scenario ${old.scenario}, this one ${now.scenario}`);
  const before = new Map(old.results.map((r) => [key(r), r]));
  const rows: string[][] = [['row', 'p50 µs', 'Δ p50', 'p99 µs', 'Δ p99', 'cpu µs/op', 'Δ cpu']];
  for (const r of now.results) {
    const o = before.get(key(r));
    before.delete(key(r));
    const label = `${r.transport} ${r.op} ${formatSize(r.sizeBytes)}`;
    if (!o) {
      rows.push([
        label,
        r.p50Us.toFixed(1),
        'new',
        r.p99Us.toFixed(1),
        '',
        r.cpuUsPerOp.toFixed(1),
        '',
      ]);
      continue;
    }
    rows.push([
      label,
      r.p50Us.toFixed(1),
      change(r.p50Us, o.p50Us),
      r.p99Us.toFixed(1),
      change(r.p99Us, o.p99Us),
      r.cpuUsPerOp.toFixed(1),
      change(r.cpuUsPerOp, o.cpuUsPerOp),
    ]);
  }
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((c) => (c[i] ?? '').length))) ?? [];
  for (const c of rows)
    lines.push(
      `  ${c
        .map((v, i) => v.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd()}`,
    );
  for (const k of before.keys()) lines.push(`  only in the earlier run: ${k}`);
  for (const h of HEADLINES) {
    const a = old.summary?.[h.key];
    const b = now.summary?.[h.key];
    if (typeof a === 'number' || typeof b === 'number')
      lines.push(`  ${h.label}: ${a ?? '—'} → ${b ?? '—'}`);
  }
  return lines.join('\n');
}

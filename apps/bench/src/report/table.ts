import { resultCells } from './columns.js';
import type { Result } from './Result.js';

/** A plain-text table with ratios against TCP measured in the same run. */
export function renderTable(rows: Result[]): string {
  const { header, lines } = resultCells(rows);
  return renderColumns(header, lines);
}

function renderColumns(header: string[], lines: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const row = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [row(header), row(widths.map((w) => '-'.repeat(w))), ...lines.map(row)].join('\n');
}

import { baselineFor } from './baselineRow.js';
import { formatRatio, formatSize } from './format.js';
import type { Result } from './Result.js';

/** One column of the results table, shared by the console table and the HTML report. */
export interface ResultColumn {
  header: string;
  /** The cell's text; '' when the row has no such figure. */
  cell: (r: Result, baseline: Result | undefined) => string;
}

const fmt = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
const opt = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? fmt(v) : '');
const vs = (value: unknown, base: unknown) =>
  typeof value === 'number' && typeof base === 'number' && base > 0 && Number.isFinite(value)
    ? formatRatio(value / base)
    : '';

/** The columns that every row has; always shown. */
const ALWAYS = 7;

/** Every column any scenario fills, in order (the first `ALWAYS` are always shown). */
export const RESULT_COLUMNS: readonly ResultColumn[] = [
  { header: 'transport', cell: (r) => r.transport },
  { header: 'op', cell: (r) => r.op },
  { header: 'size', cell: (r) => formatSize(r.sizeBytes) },
  { header: 'p50 µs', cell: (r) => opt(r.p50Us) },
  { header: 'mean µs', cell: (r) => opt(r.meanUs) },
  { header: 'p99 µs', cell: (r) => opt(r.p99Us) },
  { header: 'cpu µs/op', cell: (r) => opt(r.cpuUsPerOp) },
  { header: 'p99.9 µs', cell: (r) => opt(r.p999Us) },
  { header: 'GiB/s', cell: (r) => (r.gibPerSec === undefined ? '' : r.gibPerSec.toFixed(2)) },
  { header: 'p50 vs tcp', cell: (r, b) => vs(r.p50Us, b?.p50Us) },
  { header: 'cpu vs tcp', cell: (r, b) => vs(r.cpuUsPerOp, b?.cpuUsPerOp) },
  { header: 'GiB/s vs tcp', cell: (r, b) => vs(r.gibPerSec, b?.gibPerSec) },
  {
    header: 'heap B/op',
    cell: (r) => (typeof r.heapBytesPerOp === 'number' ? r.heapBytesPerOp.toFixed(1) : ''),
  },
  { header: 'GCs', cell: (r) => (typeof r.gcCount === 'number' ? String(r.gcCount) : '') },
  {
    header: 'idle cpu',
    cell: (r) => (typeof r.idleCpuPercent === 'number' ? `${r.idleCpuPercent.toFixed(2)} %` : ''),
  },
  { header: 'offered/s', cell: (r) => opt(r.offeredRps) },
  { header: 'achieved/s', cell: (r) => opt(r.achievedRps) },
  { header: 'from arrival: mean µs', cell: (r) => opt(r.coMeanUs) },
  { header: 'from arrival: p99 µs', cell: (r) => opt(r.coP99Us) },
  { header: 'issue lag p99 µs', cell: (r) => opt(r.lagP99Us) },
  // GCs of every process of the row (client process and servers) over its measured window.
  { header: 'full GCs', cell: (r) => (typeof r.gcMajor === 'number' ? String(r.gcMajor) : '') },
  {
    header: 'full GC/1k op',
    cell: (r) => (typeof r.majorGcPerOp === 'number' ? opt(r.majorGcPerOp * 1000) : ''),
  },
  { header: 'GC pause µs/op', cell: (r) => opt(r.gcPauseUsPerOp) },
];

/** The rows as cells, leaving out the optional columns no row fills (each scenario fills its own). */
export function resultCells(rows: Result[]): { header: string[]; lines: string[][] } {
  const all = rows.map((r) => {
    const b = baselineFor(r, rows);
    return RESULT_COLUMNS.map((c) => c.cell(r, b));
  });
  const used = RESULT_COLUMNS.map((_, i) => i < ALWAYS || all.some((l) => l[i] !== ''));
  const keep = <T>(cells: readonly T[]) => cells.filter((_, i) => used[i]);
  return { header: keep(RESULT_COLUMNS.map((c) => c.header)), lines: all.map(keep) };
}

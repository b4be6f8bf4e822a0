import type { Result } from './Result.js';

const fmt = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

export function formatSize(bytes: number): string {
  if (bytes >= 1 << 20 && bytes % (1 << 20) === 0) return `${bytes >> 20} MiB`;
  if (bytes >= 1024 && bytes % 1024 === 0) return `${bytes >> 10} KiB`;
  return `${bytes} B`;
}

/**
 * "0.08×", "1.35×", and small ratios with two significant digits ("0.0042×", not "0.00×").
 */
export function formatRatio(r: number): string {
  if (!Number.isFinite(r)) return '—';
  return `${r >= 0.095 || r === 0 ? r.toFixed(2) : r.toPrecision(2)}×`;
}

/** The ratio of a value to its TCP baseline, formatted. */
export function ratio(value: number, baseline: number | undefined): string {
  if (!baseline || !Number.isFinite(value)) return '—';
  return formatRatio(value / baseline);
}

/** The TCP row an RDMA row compares with: same size; same op, or any TCP op of that kind. */
export function baselineFor(r: Result, rows: Result[]): Result | undefined {
  if (r.transport === 'tcp') return undefined;
  // A row may name its TCP counterpart (mux over RDMA compares with mux over TCP).
  if (typeof r.baselineOp === 'string') {
    return rows.find(
      (t) => t.transport === 'tcp' && t.sizeBytes === r.sizeBytes && t.op === r.baselineOp,
    );
  }
  const kind = r.op.includes('throughput') ? 'throughput' : 'pingpong';
  return rows.find(
    (t) => t.transport === 'tcp' && t.sizeBytes === r.sizeBytes && t.op.includes(kind),
  );
}

/** A plain-text table with ratios against TCP measured in the same run. */
export function renderTable(rows: Result[]): string {
  const header = [
    'transport',
    'op',
    'size',
    'p50 µs',
    'mean µs',
    'p99 µs',
    'cpu µs/op',
    'GiB/s',
    'p50 vs tcp',
    'cpu vs tcp',
    'GiB/s vs tcp',
    'heap B/op',
    'GCs',
    'idle cpu',
    'offered/s',
    'achieved/s',
    'arr. mean µs',
    'arr. p99 µs',
    'lag p99 µs',
  ];
  const opt = (v: unknown) => (typeof v === 'number' ? fmt(v) : '');
  const lines = rows.map((r) => {
    const b = baselineFor(r, rows);
    return [
      r.transport,
      r.op,
      formatSize(r.sizeBytes),
      fmt(r.p50Us),
      fmt(r.meanUs),
      fmt(r.p99Us),
      fmt(r.cpuUsPerOp),
      r.gibPerSec === undefined ? '' : r.gibPerSec.toFixed(2),
      b ? ratio(r.p50Us, b.p50Us) : '',
      b ? ratio(r.cpuUsPerOp, b.cpuUsPerOp) : '',
      b && r.gibPerSec !== undefined && b.gibPerSec ? ratio(r.gibPerSec, b.gibPerSec) : '',
      typeof r.heapBytesPerOp === 'number' ? r.heapBytesPerOp.toFixed(1) : '',
      typeof r.gcCount === 'number' ? String(r.gcCount) : '',
      typeof r.idleCpuPercent === 'number' ? `${r.idleCpuPercent.toFixed(2)} %` : '',
      opt(r.offeredRps),
      opt(r.achievedRps),
      opt(r.coMeanUs),
      opt(r.coP99Us),
      opt(r.lagP99Us),
    ];
  });
  // Columns no row fills (each scenario fills its own) are left out.
  const used = header.map((_, i) => lines.some((l) => (l[i] ?? '') !== ''));
  used.fill(true, 0, 7);
  const keep = <T>(cells: T[]) => cells.filter((_, i) => used[i]);
  return renderColumns(keep(header), lines.map(keep));
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

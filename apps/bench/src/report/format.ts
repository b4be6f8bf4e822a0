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

const MiB = 1 << 20;

/** Fewer round trips for big messages so the default run stays short. */
export function iterationsFor(size: number, base: number): number {
  if (size >= MiB) return Math.max(50, Math.floor(base / 40));
  if (size >= 64 * 1024) return Math.max(200, Math.floor(base / 8));
  return base;
}

/**
 * Unmeasured round trips before each row. Node's TCP path at 64 KiB needed ~2000 round
 * trips (or ~256 MiB moved) to settle, well past N/10: a short warm-up made its p50 2–3×
 * worse and noisy (64 B and 4 KiB settle within N/10). Same for every row of a size, TCP or verbs, and for the baseline script.
 */
export function warmupFor(size: number, iterations: number): number {
  const settle = size >= 64 * 1024 ? Math.min(2000, Math.ceil((256 * MiB) / size)) : 0;
  return Math.max(10, Math.floor(iterations / 10), settle);
}

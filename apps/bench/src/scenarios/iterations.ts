const MiB = 1 << 20;

/** Fewer round trips for big messages so the default run stays short. */
export function iterationsFor(size: number, base: number): number {
  if (size >= MiB) return Math.max(50, Math.floor(base / 40));
  if (size >= 64 * 1024) return Math.max(200, Math.floor(base / 8));
  return base;
}

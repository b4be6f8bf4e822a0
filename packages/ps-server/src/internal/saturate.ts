// The overflow rule of saturating tables (SparseTableConfig.overflow), the same as the native
// kernels' Saturate(): finite gradients can still push a weight or an optimizer state past the
// largest finite float (an overflowing square, a huge learning rate) or make an update
// undefined (∞ − ∞ inside a formula). Such an element is held at ±limit, and one whose update
// came out NaN keeps its value from before the update, so a row never holds NaN or ±Inf.

/** The largest finite float32. */
export const F32_MAX = 3.4028234663852886e38;
/** The largest finite half: f16 rows saturate here, before rounding (65520 and up round to ∞). */
export const F16_MAX = 65504;

/** x[at … at+n) saturated against old[oldAt …) (the same elements before the update). */
export function saturate(
  x: Float32Array,
  at: number,
  n: number,
  old: Float32Array,
  oldAt: number,
  limit: number,
): void {
  for (let j = 0; j < n; j++) {
    const v = x[at + j] as number;
    if (!(Math.abs(v) <= limit))
      x[at + j] = Number.isNaN(v) ? (old[oldAt + j] as number) : v > 0 ? limit : -limit;
  }
}

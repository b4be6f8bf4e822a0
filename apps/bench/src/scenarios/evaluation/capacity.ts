/** A target's closed-loop capacity: requests per second at a fixed number in flight. */
export interface Capacity {
  rps: number;
  /** Requests kept in flight while it was measured. */
  concurrency: number;
}

/** Closed loop: `concurrency` workers each issuing the next request when theirs completes. */
export async function closedLoopRps(
  request: (k: number) => Promise<void>,
  concurrency: number,
  durationMs: number,
): Promise<number> {
  let k = 0;
  let done = 0;
  const t0 = performance.now();
  const end = t0 + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await request(k++);
        done++;
      }
    }),
  );
  return done / ((performance.now() - t0) / 1000);
}

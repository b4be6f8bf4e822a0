/** One closed-loop probe: requests per second with `concurrency` requests always in flight. */
export interface CapacityProbe {
  concurrency: number;
  rps: number;
}

export interface CapacitySearchOptions {
  /** First concurrency probed. */
  startConcurrency: number;
  /** Highest concurrency probed (doubling from the start). */
  maxConcurrency: number;
  /** Keep doubling only while a probe beats the best so far by more than this fraction. */
  minGain: number;
}

export interface Capacity {
  /** The best closed-loop throughput seen, requests per second. */
  rps: number;
  /** The concurrency it was seen at. */
  concurrency: number;
  probes: CapacityProbe[];
}

/**
 * A target's closed-loop capacity: throughput at `startConcurrency`, doubled while more
 * requests in flight still buy more than `minGain` (a saturated service gains nothing but
 * queueing from more). `measure` runs one probe; the search itself is pure, so it is tested
 * without a clock.
 */
export async function searchCapacity(
  measure: (concurrency: number) => Promise<number>,
  o: CapacitySearchOptions,
): Promise<Capacity> {
  if (!(o.startConcurrency >= 1 && o.maxConcurrency >= o.startConcurrency && o.minGain >= 0))
    throw new Error('capacity search: bad options');
  const probes: CapacityProbe[] = [];
  let best: CapacityProbe | undefined;
  for (let c = o.startConcurrency; c <= o.maxConcurrency; c *= 2) {
    const rps = await measure(c);
    probes.push({ concurrency: c, rps });
    const gained = best === undefined || rps > best.rps * (1 + o.minGain);
    if (best === undefined || rps > best.rps) best = { concurrency: c, rps };
    if (!gained) break;
  }
  const b = best as CapacityProbe;
  return { rps: b.rps, concurrency: b.concurrency, probes };
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

/** A small seeded generator (xorshift32): the same workload every run, no allocation per draw. */
export function xorshift32(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x >>> 0;
  };
}

/** Uniform in [0, 1) from a xorshift32 stream. */
export function uniform(next: () => number): number {
  return next() / 4_294_967_296;
}

/** An exponential gap with mean `mean` (Poisson arrivals), from a uniform stream. */
export function exponential(next: () => number, mean: number): number {
  return -Math.log(1 - uniform(next)) * mean;
}

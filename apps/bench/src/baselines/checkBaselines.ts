import { EchoPeer } from '../peers/EchoPeer.js';
import { iterationsFor, warmupFor } from '../scenarios/iterations.js';
import { tcpPingPong } from '../scenarios/tcp.js';
import { type BaselineComparison, compareBaselines, ScriptBaseline } from './tcpBaseline.js';

/** Default number of interleaved rounds per size. */
export const BASELINE_ROUNDS = 9;

/**
 * The `--check-baselines` run: per size, `rounds` short rounds alternating the bench's
 * tcp/pingpong (its own echo peer) and the plain-Node script (one process kept for every
 * round; which side goes first alternates), then the median of the rounds' ratios is
 * checked. On a loaded machine one long run of each, a minute apart, met different load;
 * a pair of short rounds back to back meets the same, and the median drops the rounds
 * that caught a burst.
 */
export async function checkBaselines(
  sizes: number[],
  baseIterations: number,
  rounds: number,
  progress: (label: string) => void,
): Promise<BaselineComparison[]> {
  const peer = await EchoPeer.spawn();
  const baseline = ScriptBaseline.start();
  try {
    const all = [];
    for (const size of sizes) {
      const iterations = Math.max(50, Math.ceil(iterationsFor(size, baseIterations) / rounds));
      // Each round is a fresh connection on both sides, so each warms up as a whole row would.
      const warmup = warmupFor(size, iterationsFor(size, baseIterations));
      const bench: number[] = [];
      const script: number[] = [];
      for (let k = 0; k < rounds; k++) {
        progress(`baseline check ${size} B, round ${k + 1}/${rounds}`);
        const runBench = async () =>
          bench.push((await tcpPingPong(peer, size, iterations, warmup)).p50Us);
        const runScript = async () =>
          script.push((await baseline.measure(size, iterations, warmup)).p50Us);
        if (k % 2 === 0) {
          await runBench();
          await runScript();
        } else {
          await runScript();
          await runBench();
        }
      }
      all.push({ sizeBytes: size, bench, script });
    }
    return compareBaselines(all);
  } finally {
    await Promise.all([peer.close(), baseline.close()]);
  }
}

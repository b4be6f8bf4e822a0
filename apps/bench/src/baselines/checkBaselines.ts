import { EchoPeer } from '../peers/EchoPeer.js';
import { iterationsFor, warmupFor } from '../scenarios/iterations.js';
import { tcpPingPong } from '../scenarios/tcp.js';
import { type BaselineComparison, compareBaselines, runTcpBaseline } from './tcpBaseline.js';

/** Default number of interleaved rounds per size. */
export const BASELINE_ROUNDS = 5;

/**
 * The `--check-baselines` run: per size, `rounds` short rounds alternating the bench's
 * tcp/pingpong (its own echo peer) and the plain-Node script (which order goes first
 * alternates too), then the medians of the two sides' p50s are compared. On a loaded
 * machine one long run of each, minutes apart, saw different noise; interleaving puts
 * both sides in the same noise, and the median drops a round that caught a burst.
 */
export async function checkBaselines(
  sizes: number[],
  baseIterations: number,
  rounds: number,
  progress: (label: string) => void,
): Promise<BaselineComparison[]> {
  const peer = await EchoPeer.spawn();
  try {
    const all = [];
    for (const size of sizes) {
      const iterations = Math.max(50, Math.ceil(iterationsFor(size, baseIterations) / rounds));
      // Each round starts on a fresh connection (and the script in a fresh process), so
      // each round warms up as a whole row would.
      const warmup = warmupFor(size, iterationsFor(size, baseIterations));
      const bench: number[] = [];
      const script: number[] = [];
      for (let k = 0; k < rounds; k++) {
        progress(`baseline check ${size} B, round ${k + 1}/${rounds}`);
        const runBench = async () =>
          bench.push((await tcpPingPong(peer, size, iterations, warmup)).p50Us);
        const runScript = async () => {
          const [row] = await runTcpBaseline([size], [iterations], [warmup]);
          if (!row || row.sizeBytes !== size) throw new Error(`baseline script: no ${size} B row`);
          script.push(row.p50Us);
        };
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
    await peer.close();
  }
}

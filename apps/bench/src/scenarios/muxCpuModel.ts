// What the same-load rows' CPU is made of: measured at two offered loads, each transport's
// CPU per second (both processes) splits into a part that does not grow with the rate and a
// part per message (the line through the two points). At these rates the open loop issues its
// arrivals from 1 ms timer ticks, so many messages share each process's wake-up; a ratio of
// CPU per message near 1 with a per-message part far from it says the wake-ups (about the same
// count for every transport) dominate, not the transport's work per message.
import type { Result } from '../report/Result.js';

export interface CpuSplit {
  /** CPU per second at no load, extrapolated (ms/s, both processes). */
  fixedMsPerSec: number;
  /** CPU per additional message (µs, both processes). */
  marginalUs: number;
  /** The marginal part measured round by round (rounds i of both loads paired). */
  marginalRoundsUs: number[];
}

/** The split from two rows of one transport at different offered loads; undefined if unusable. */
export function cpuSplit(low: Result, high: Result): CpuSplit | undefined {
  const rl = low.achievedRps as number | undefined;
  const rh = high.achievedRps as number | undefined;
  if (rl === undefined || rh === undefined || !(rh > rl)) return undefined;
  const marginalUs = (high.cpuUsPerOp * rh - low.cpuUsPerOp * rl) / (rh - rl);
  const fixedMsPerSec = (low.cpuUsPerOp * rl - marginalUs * rl) / 1000;
  // Per round at the offered rates (each round serves what is offered unless it dropped).
  const ol = low.offeredRps as number;
  const oh = high.offeredRps as number;
  const cl = (low.cpuUsPerOpRounds as number[] | undefined) ?? [];
  const ch = (high.cpuUsPerOpRounds as number[] | undefined) ?? [];
  const marginalRoundsUs: number[] = [];
  for (let i = 0; i < Math.min(cl.length, ch.length); i++)
    marginalRoundsUs.push(((ch[i] as number) * oh - (cl[i] as number) * ol) / (oh - ol));
  return { fixedMsPerSec, marginalUs, marginalRoundsUs };
}

/**
 * One line per transport of the open-loop rows (`op` names its rows, `@NN%` its load): the
 * split, and the wake-ups per message of both processes at each load.
 */
export function cpuSplitLines(rows: Result[]): string[] {
  const byName = new Map<string, Result[]>();
  for (const r of rows) {
    const name = `${r.transport}${r.op.replace(/^mux-open x\d+ @\d+%/, '')}`;
    byName.set(name, [...(byName.get(name) ?? []), r]);
  }
  const lines: string[] = [];
  for (const [name, rs] of byName) {
    const sorted = [...rs].sort((a, b) => (a.offeredRps as number) - (b.offeredRps as number));
    const low = sorted[0];
    const high = sorted[sorted.length - 1];
    if (low === undefined || high === undefined || low === high) continue;
    const s = cpuSplit(low, high);
    if (s === undefined) continue;
    const woken = sorted
      .filter((r) => typeof r.wakeupsPerMsg === 'number')
      .map(
        (r) => `${(r.wakeupsPerMsg as number).toFixed(3)} @${Math.round(r.offeredRps as number)}/s`,
      );
    lines.push(
      `${name}: CPU ≈ ${s.fixedMsPerSec.toFixed(0)} ms/s + ${s.marginalUs.toFixed(1)} µs per message ` +
        `(both processes; per-message part by round ${s.marginalRoundsUs.map((x) => x.toFixed(1)).join(', ')})` +
        (woken.length > 0 ? `, wake-ups per message ${woken.join(', ')}` : ''),
    );
  }
  return lines;
}

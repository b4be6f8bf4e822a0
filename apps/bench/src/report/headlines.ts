import { formatRatio } from './format.js';
import { GRPC_SAME_LOAD, HEADLINES } from './paper.js';
import type { Summary } from './summary.js';

/** The headline ratios: ours (or why there is none yet), our target, the paper's figure. */
export function renderHeadlines(summary: Summary): string {
  const lines = [
    'headline ratios (ours, this run) | target on soft | paper (its production cluster, not ours)',
  ];
  for (const h of HEADLINES) {
    const v = summary[h.key];
    const ours =
      v === null ? 'not measured in this run (see the evaluation scenario)' : formatRatio(v);
    const paper = h.paper === undefined ? h.paperText : `${h.paper.toFixed(2)}× (${h.paperText})`;
    lines.push(
      `  ${h.label.padEnd(36)} ${ours.padEnd(56)} ≤ ${h.target.toFixed(2)}×   paper: ${paper}`,
    );
  }
  const same = summary.grpcFetchMeanRatioSameLoad;
  if (typeof same === 'number')
    lines.push(`  ${GRPC_SAME_LOAD.label}: ${formatRatio(same)} (${GRPC_SAME_LOAD.why})`);
  return lines.join('\n');
}

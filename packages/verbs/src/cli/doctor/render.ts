// Human text of a doctor report: one line per check, the fix under what failed.
import type { CheckStatus } from './check.js';
import type { DoctorReport } from './run.js';

const LABEL: Record<CheckStatus, string> = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL', skip: 'skip' };

export function renderText(r: DoctorReport): string {
  const head =
    r.asked === 'auto'
      ? `rdmajs doctor: checking the ${r.provider} provider (what provider: 'auto' picks here)`
      : `rdmajs doctor: checking the ${r.provider} provider`;
  const lines = [`${head}${r.device ? `, device ${r.device}` : ''}`, ''];
  for (const c of r.checks) {
    lines.push(`${LABEL[c.status]}  ${c.title}: ${c.detail}`);
    if (c.fix && (c.status === 'fail' || c.status === 'warn')) lines.push(`      fix: ${c.fix}`);
  }
  const failed = r.checks.filter((c) => c.status === 'fail').length;
  const warned = r.checks.filter((c) => c.status === 'warn').length;
  lines.push(
    '',
    r.ok
      ? `The ${r.provider} provider can work here${warned ? ` (${warned} warning${warned > 1 ? 's' : ''})` : ''}.`
      : `The ${r.provider} provider cannot work here: ${failed} problem${failed > 1 ? 's' : ''} above.`,
  );
  return `${lines.join('\n')}\n`;
}

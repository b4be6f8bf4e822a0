// Checks a `rdmajs doctor --json` report read from stdin against what the rxe lane
// expects: `node doctor-expect.mjs ok|fail [check=status ...]`.
import { readFileSync } from 'node:fs';

const [verdict, ...expected] = process.argv.slice(2);
const report = JSON.parse(readFileSync(0, 'utf8'));
const problems = [];
if (report.ok !== (verdict === 'ok')) problems.push(`ok is ${report.ok}, expected ${verdict}`);
for (const e of expected) {
  const [id, status] = e.split('=');
  const c = report.checks.find((x) => x.id === id);
  if (c?.status !== status)
    problems.push(`${id}: ${c ? `${c.status} (${c.detail})` : 'missing'}, expected ${status}`);
}
for (const c of report.checks) console.log(`  ${c.status.padEnd(4)} ${c.id}: ${c.detail}`);
if (problems.length) {
  console.error(`doctor report not as expected:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Report } from './Result.js';

export function writeJson(file: string, report: Report): void {
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
}

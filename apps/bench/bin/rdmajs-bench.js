#!/usr/bin/env node
// The bench runs its TypeScript through tsx (its echo peer is forked the same way).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
const r = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--conditions=@rdmajs/source', cli, ...process.argv.slice(2)],
  { stdio: 'inherit' },
);
process.exit(r.status ?? 1);

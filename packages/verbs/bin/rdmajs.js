#!/usr/bin/env node
// Runs the built CLI; inside the repository without a build, falls back to the source via tsx.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const built = new URL('../dist/cli/main.js', import.meta.url);
let main;
if (existsSync(fileURLToPath(built))) {
  ({ main } = await import(built.href));
} else {
  const { tsImport } = await import('tsx/esm/api');
  ({ main } = await tsImport('../src/cli/main.ts', import.meta.url));
}
process.exitCode = main(process.argv);

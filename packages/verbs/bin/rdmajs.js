#!/usr/bin/env node
// Runs the built CLI; inside the repository without a build, falls back to the source via tsx.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const built = new URL('../dist/cli/devices.js', import.meta.url);
if (existsSync(fileURLToPath(built))) {
  const { main } = await import(built.href);
  main(process.argv);
} else {
  const { tsImport } = await import('tsx/esm/api');
  const { main } = await tsImport('../src/cli/devices.ts', import.meta.url);
  main(process.argv);
}

// Builds the kernels addon offline: node-gyp is pointed at Node's own headers (pnpm does not
// forward .npmrc to scripts, so without this node-gyp tries to download them). Incremental
// when already configured for this binding.gyp.
// RDMAJS_SANITIZE=1 builds an AddressSanitizer + UBSan addon into build/sanitize/build/Release
// instead (the normal build is left as it is), as packages/verbs does; the sanitizer lane
// (scripts/lanes/sanitize.sh) loads it with libasan preloaded.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const require = createRequire(import.meta.url);
const nodeGyp = require.resolve('node-gyp/bin/node-gyp.js');
const nodeDir = dirname(dirname(process.execPath));
const env = { ...process.env };
if (!env.npm_config_nodedir && existsSync(join(nodeDir, 'include', 'node', 'common.gypi')))
  env.npm_config_nodedir = nodeDir;
const sanitize = process.env.RDMAJS_SANITIZE === '1';
const dir = sanitize ? join(root, 'build', 'sanitize') : root;
if (sanitize) {
  const gyp = JSON.parse(readFileSync(join(root, 'binding.gyp'), 'utf8'));
  const flags = [
    '-fsanitize=address,undefined',
    '-fno-sanitize-recover=all',
    '-fno-omit-frame-pointer',
    '-g',
  ];
  for (const t of gyp.targets) {
    t.sources = t.sources.map((s) => join('..', '..', s));
    // -ffp-contract=off stays: the sanitized kernels must compute what the normal ones do.
    t.cflags_cc = [...t.cflags_cc.filter((f) => !f.startsWith('-O')), '-O1', ...flags];
    t.ldflags = [...(t.ldflags ?? []), '-fsanitize=address,undefined'];
  }
  mkdirSync(dir, { recursive: true });
  const text = JSON.stringify(gyp, null, 2);
  const path = join(dir, 'binding.gyp');
  if (!existsSync(path) || readFileSync(path, 'utf8') !== text) writeFileSync(path, text);
}
const makefile = join(dir, 'build', 'Makefile');
const configured =
  existsSync(makefile) && statSync(join(dir, 'binding.gyp')).mtimeMs < statSync(makefile).mtimeMs;
const args = configured ? ['build', '-j', '2'] : ['rebuild', '-j', '2'];
const r = spawnSync(process.execPath, [nodeGyp, ...args], { cwd: dir, env, stdio: 'inherit' });
process.exit(r.status ?? 1);

// Builds the addon offline: node-gyp is pointed at Node's own headers (pnpm does not
// forward .npmrc to scripts, so without this node-gyp tries to download them).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const require = createRequire(import.meta.url);
const nodeGyp = require.resolve('node-gyp/bin/node-gyp.js');
// Node's own headers, when this Node install has them (official builds do) and none were
// configured; otherwise node-gyp fetches them for this Node version.
const nodeDir = dirname(dirname(process.execPath));
const env = { ...process.env };
if (!env.npm_config_nodedir && existsSync(join(nodeDir, 'include', 'node', 'common.gypi')))
  env.npm_config_nodedir = nodeDir;

// The ibverbs provider is compiled only where libibverbs headers exist (libibverbs-dev).
const haveIbverbs = existsSync('/usr/include/infiniband/verbs.h');
// RDMAJS_SANITIZE=1 builds an AddressSanitizer + UBSan addon into build/sanitize/build/Release
// instead (the normal build in build/Release is left as it is): a generated binding.gyp
// there names the same sources. scripts/lanes/sanitize.sh loads it with libasan preloaded.
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
  const relocate = (t) => {
    if (t.sources) t.sources = t.sources.map((s) => join('..', '..', s));
    for (const c of t.conditions ?? []) for (const branch of c.slice(1)) relocate(branch);
  };
  for (const t of gyp.targets) {
    relocate(t);
    t.cflags_cc = [...t.cflags_cc.filter((f) => !f.startsWith('-O')), '-O1', ...flags];
    t.cflags = ['-O1', ...flags];
    t.ldflags = [...(t.ldflags ?? []), '-fsanitize=address,undefined'];
  }
  mkdirSync(dir, { recursive: true });
  const text = JSON.stringify(gyp, null, 2);
  const path = join(dir, 'binding.gyp');
  if (!existsSync(path) || readFileSync(path, 'utf8') !== text) writeFileSync(path, text);
}
const makefile = join(dir, 'build', 'Makefile');
const stamp = join(dir, 'build', 'config-stamp.json');
const config = JSON.stringify({ haveIbverbs, sanitize });
// Incremental when configured for the same binding.gyp and headers: make recompiles what changed.
const configured =
  existsSync(makefile) &&
  existsSync(stamp) &&
  readFileSync(stamp, 'utf8') === config &&
  statSync(join(dir, 'binding.gyp')).mtimeMs < statSync(makefile).mtimeMs;
const args = configured ? ['build', '-j', '2'] : ['rebuild', '-j', '2'];
const r = spawnSync(process.execPath, [nodeGyp, ...args], { cwd: dir, env, stdio: 'inherit' });
if (r.status === 0) {
  writeFileSync(stamp, config);
  if (!haveIbverbs)
    console.log(
      '@rdmajs/verbs: built without the ibverbs provider (no /usr/include/infiniband/verbs.h; install libibverbs-dev)',
    );
}
process.exit(r.status ?? 1);

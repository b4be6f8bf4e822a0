// Builds the addon offline: node-gyp is pointed at Node's own headers (pnpm does not
// forward .npmrc to scripts, so without this node-gyp tries to download them).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
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
const makefile = join(root, 'build', 'Makefile');
const stamp = join(root, 'build', 'config-stamp.json');
const config = JSON.stringify({ haveIbverbs });
// Incremental when configured for the same binding.gyp and headers: make recompiles what changed.
const configured =
  existsSync(makefile) &&
  existsSync(stamp) &&
  readFileSync(stamp, 'utf8') === config &&
  statSync(join(root, 'binding.gyp')).mtimeMs < statSync(makefile).mtimeMs;
const args = configured ? ['build', '-j', '2'] : ['rebuild', '-j', '2'];
const r = spawnSync(process.execPath, [nodeGyp, ...args], { cwd: root, env, stdio: 'inherit' });
if (r.status === 0) {
  writeFileSync(stamp, config);
  if (!haveIbverbs)
    console.log(
      '@rdmajs/verbs: built without the ibverbs provider (no /usr/include/infiniband/verbs.h; install libibverbs-dev)',
    );
}
process.exit(r.status ?? 1);

// Builds the kernels addon offline: node-gyp is pointed at Node's own headers (pnpm does not
// forward .npmrc to scripts, so without this node-gyp tries to download them). Incremental
// when already configured for this binding.gyp.
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
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
const makefile = join(root, 'build', 'Makefile');
const configured =
  existsSync(makefile) && statSync(join(root, 'binding.gyp')).mtimeMs < statSync(makefile).mtimeMs;
const args = configured ? ['build', '-j', '2'] : ['rebuild', '-j', '2'];
const r = spawnSync(process.execPath, [nodeGyp, ...args], { cwd: root, env, stdio: 'inherit' });
process.exit(r.status ?? 1);

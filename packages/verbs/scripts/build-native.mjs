// Builds the addon offline: node-gyp is pointed at Node's own headers (pnpm does not
// forward .npmrc to scripts, so without this node-gyp tries to download them).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const require = createRequire(import.meta.url);
const nodeGyp = require.resolve('node-gyp/bin/node-gyp.js');
const env = { ...process.env, npm_config_nodedir: dirname(dirname(process.execPath)) };
// Incremental when already configured: make only recompiles what changed.
const configured = existsSync(join(root, 'build', 'Makefile'));
const args = configured ? ['build', '-j', '2'] : ['rebuild', '-j', '2'];
const r = spawnSync(process.execPath, [nodeGyp, ...args], { cwd: root, env, stdio: 'inherit' });
process.exit(r.status ?? 1);

// `prepack`: puts this host's freshly built kernels addon into prebuilds/<platform>-<arch>/ so
// the tarball installs without a compiler; `--clean` (postpack) removes it again, so the
// repository's own installs keep building from source.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { addonFile, prebuiltPath } from './prebuilt.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));

if (process.argv.includes('--clean')) {
  rmSync(join(root, 'prebuilds'), { recursive: true, force: true });
  process.exit(0);
}

// The plain release build (build/Release; a sanitizer build goes to build/sanitize).
const env = { ...process.env };
delete env.RDMAJS_SANITIZE;
const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], {
  cwd: root,
  env,
  stdio: 'inherit',
});
if (r.status !== 0) process.exit(r.status ?? 1);
const target = prebuiltPath(root);
mkdirSync(dirname(target), { recursive: true });
copyFileSync(join(root, 'build', 'Release', addonFile), target);
console.log(`@rdmajs/ps-server prepack: prebuilt ${process.platform}-${process.arch} addon added`);

// `prepack`: puts this host's freshly built addon into prebuilds/<platform>-<arch>-node<abi>/ so the
// tarball installs without a compiler; `--clean` (postpack) removes it again, so the
// repository's own installs keep building from source.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { addonFile, prebuiltPath } from './prebuilt.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));

if (process.argv.includes('--clean')) {
  rmSync(join(root, 'prebuilds'), { recursive: true, force: true });
  process.exit(0);
}

const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], {
  cwd: root,
  stdio: 'inherit',
});
if (r.status !== 0) process.exit(r.status ?? 1);

// What ships must be the plain release build with the ibverbs provider compiled in (it
// loads libibverbs at run time, so it still loads where rdma-core is missing); any other
// build switch in the stamp (a sanitizer, say) must be off.
const stamp = JSON.parse(readFileSync(join(root, 'build', 'config-stamp.json'), 'utf8'));
const extra = Object.entries(stamp).filter(([k, v]) => k !== 'haveIbverbs' && v);
if (stamp.haveIbverbs !== true || extra.length > 0) {
  console.error(
    `@rdmajs/verbs prepack: refusing to ship this build as prebuilt (${JSON.stringify(stamp)}): ` +
      'it needs libibverbs headers (libibverbs-dev) and no extra build switches',
  );
  process.exit(1);
}
const target = prebuiltPath(root);
mkdirSync(dirname(target), { recursive: true });
copyFileSync(join(root, 'build', 'Release', addonFile), target);
console.log(`@rdmajs/verbs prepack: prebuilt ${process.platform}-${process.arch} addon added`);

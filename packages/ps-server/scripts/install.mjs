// The package's `install` step: uses the prebuilt kernels addon shipped for this platform when
// it loads here, else builds from source (build-native.mjs; needs python3, make and g++).
// `npm install --build-from-source` (npm_config_build_from_source) skips the prebuilt one.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { addonFile, prebuiltPath } from './prebuilt.mjs';

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const fromSource = /^(true|1|@rdmajs\/ps-server)$/.test(
  process.env.npm_config_build_from_source ?? '',
);
const prebuilt = prebuiltPath(root);

// A prebuilt binary is used only if it loads in this Node on this libc (checked in a child
// process, so a bad binary cannot take the installer down with it).
function loads(file) {
  const r = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(file)})`], {
    stdio: ['ignore', 'ignore', 'pipe'],
    encoding: 'utf8',
  });
  if (r.status !== 0)
    console.log(
      `@rdmajs/ps-server: the prebuilt kernels addon does not load here: ${r.stderr.split('\n')[0]}`,
    );
  return r.status === 0;
}

if (!fromSource && existsSync(prebuilt) && loads(prebuilt)) {
  // The loader looks in build/Release: the prebuilt binary goes where a source build would.
  const target = join(root, 'build', 'Release', addonFile);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(prebuilt, target);
  console.log(
    `@rdmajs/ps-server: using the prebuilt kernels addon for ${process.platform}-${process.arch}`,
  );
} else {
  const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs')], {
    cwd: root,
    stdio: 'inherit',
  });
  process.exit(r.status ?? 1);
}

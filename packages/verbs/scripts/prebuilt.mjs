// Where the prebuilt addon of a platform lives in the package. The addon creates registered
// memory's ArrayBuffers through V8's C++ API (kept off V8's external-memory count), so a
// binary serves only the Node ABI it was built for: the directory names it
// (process.versions.modules), and other Node versions build from source.
import { join } from 'node:path';

export const addonFile = 'rdmajs_verbs.node';

export function prebuiltPath(
  root,
  platform = process.platform,
  arch = process.arch,
  abi = process.versions.modules,
) {
  return join(root, 'prebuilds', `${platform}-${arch}-node${abi}`, addonFile);
}

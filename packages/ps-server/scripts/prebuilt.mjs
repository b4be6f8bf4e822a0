// Where the prebuilt kernels addon of a platform lives in the package (one Node-API binary
// serves every Node version from 20 on).
import { join } from 'node:path';

export const addonFile = 'rdmajs_ps_kernels.node';

export function prebuiltPath(root, platform = process.platform, arch = process.arch) {
  return join(root, 'prebuilds', `${platform}-${arch}`, addonFile);
}

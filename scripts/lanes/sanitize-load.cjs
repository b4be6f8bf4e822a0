// Preloaded (NODE_OPTIONS=--require) by sanitize.sh: every load of the verbs addon (and of the
// ps-server kernels addon) takes the AddressSanitizer + UBSan build in build/sanitize instead,
// in this process and in the child processes the tests spawn (they inherit NODE_OPTIONS).
// Nothing in src/ knows about it.
const Module = require('node:module');
const path = require('node:path');

// biome-ignore lint/suspicious/noUndeclaredEnvVars: set by sanitize.sh for this process tree, not a turbo task input
const verbs = process.env.RDMAJS_SANITIZE_ADDON;
// biome-ignore lint/suspicious/noUndeclaredEnvVars: set by sanitize.sh for this process tree, not a turbo task input
const kernels = process.env.RDMAJS_SANITIZE_PS_ADDON;
if (!verbs) throw new Error('sanitize-load.cjs: RDMAJS_SANITIZE_ADDON is not set');
const swaps = [[path.join('packages', 'verbs', 'build', 'Release', 'rdmajs_verbs.node'), verbs]];
if (kernels)
  swaps.push([
    path.join('packages', 'ps-server', 'build', 'Release', 'rdmajs_ps_kernels.node'),
    kernels,
  ]);
const load = Module._extensions['.node'];
Module._extensions['.node'] = function (module, filename) {
  const swap = swaps.find(([normal]) => filename.endsWith(normal));
  return load.call(this, module, swap ? swap[1] : filename);
};

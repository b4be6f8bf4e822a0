// Preloaded (NODE_OPTIONS=--require) by sanitize.sh: every load of the verbs addon takes the
// AddressSanitizer + UBSan build in build/sanitize instead, in this process and in the child
// processes the tests spawn (they inherit NODE_OPTIONS). Nothing in src/ knows about it.
const Module = require('node:module');
const path = require('node:path');

const normal = path.join('packages', 'verbs', 'build', 'Release', 'rdmajs_verbs.node');
// biome-ignore lint/suspicious/noUndeclaredEnvVars: set by sanitize.sh for this process tree, not a turbo task input
const sanitized = process.env.RDMAJS_SANITIZE_ADDON;
if (!sanitized) throw new Error('sanitize-load.cjs: RDMAJS_SANITIZE_ADDON is not set');
const load = Module._extensions['.node'];
Module._extensions['.node'] = function (module, filename) {
  return load.call(this, module, filename.endsWith(normal) ? sanitized : filename);
};

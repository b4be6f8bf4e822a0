#!/usr/bin/env bash
# The sanitizer lane: the verbs addon and the ps-server kernels addon built with
# -fsanitize=address,undefined (RDMAJS_SANITIZE=1, into packages/*/build/sanitize; the normal
# builds are untouched), then the verbs vitest project on the soft provider and the ps-server
# project with libasan preloaded into node. SANITIZE_PROJECTS="ps-server" runs one of them.
# Any ASan or UBSan report aborts the process that hit it, which fails its test (child
# processes) or the run (the vitest worker): the lane passes only with zero reports.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
verbs=$root/packages/verbs
ps=$root/packages/ps-server
projects=${SANITIZE_PROJECTS:-verbs ps-server}

echo "=== sanitize lane: build (RDMAJS_SANITIZE=1)"
(cd "$verbs" && RDMAJS_SANITIZE=1 node scripts/build-native.mjs)
addon=$verbs/build/sanitize/build/Release/rdmajs_verbs.node
[ -f "$addon" ] || { echo "no sanitized addon at $addon"; exit 1; }
(cd "$ps" && RDMAJS_SANITIZE=1 node scripts/build-native.mjs)
ps_addon=$ps/build/sanitize/build/Release/rdmajs_ps_kernels.node
[ -f "$ps_addon" ] || { echo "no sanitized addon at $ps_addon"; exit 1; }

# node itself is not instrumented: the ASan runtime must be loaded first. Leaks are not
# checked (V8 and Node keep memory until exit by design); every other report is fatal.
libasan=$(gcc -print-file-name=libasan.so)
[ -f "$libasan" ] || { echo "libasan not found (gcc -print-file-name=libasan.so)"; exit 1; }
logdir=$(mktemp -d)
export LD_PRELOAD=$libasan
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_odr_violation=0:log_path=$logdir/asan"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$logdir/ubsan"
export RDMAJS_SANITIZE_ADDON=$addon
export RDMAJS_SANITIZE_PS_ADDON=$ps_addon
export NODE_OPTIONS="--require $root/scripts/lanes/sanitize-load.cjs ${NODE_OPTIONS:-}"
export RDMAJS_TEST_PROVIDERS=soft

echo "=== sanitize lane: $projects tests (verbs on soft) under ASan + UBSan"
start=$(date +%s)
set +e
# shellcheck disable=SC2046
node "$root/node_modules/vitest/vitest.mjs" run $(printf -- '--project %s ' $projects) "$@"
rc=$?
set -e
echo "=== sanitize lane: tests took $(( $(date +%s) - start )) s"

# A report in a process whose failure a test expected (or that was killed) still counts.
reports=$(find "$logdir" -type f | sort)
if [ -n "$reports" ]; then
  for f in $reports; do echo "--- $f"; cat "$f"; done
  echo "=== sanitize lane: FAILED (sanitizer reports above)"
  exit 1
fi
rm -rf "$logdir"
[ "$rc" -eq 0 ] || { echo "=== sanitize lane: FAILED (tests)"; exit "$rc"; }
echo "=== sanitize lane: passed, zero reports"

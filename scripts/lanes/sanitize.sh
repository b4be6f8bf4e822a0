#!/usr/bin/env bash
# The sanitizer lane: the verbs addon built with -fsanitize=address,undefined
# (RDMAJS_SANITIZE=1, into packages/verbs/build/sanitize; the normal build is untouched),
# then the verbs vitest project on the soft provider with libasan preloaded into node.
# Any ASan or UBSan report aborts the process that hit it, which fails its test (child
# processes) or the run (the vitest worker): the lane passes only with zero reports.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
verbs=$root/packages/verbs

echo "=== sanitize lane: build (RDMAJS_SANITIZE=1)"
(cd "$verbs" && RDMAJS_SANITIZE=1 node scripts/build-native.mjs)
addon=$verbs/build/sanitize/build/Release/rdmajs_verbs.node
[ -f "$addon" ] || { echo "no sanitized addon at $addon"; exit 1; }

# node itself is not instrumented: the ASan runtime must be loaded first. Leaks are not
# checked (V8 and Node keep memory until exit by design); every other report is fatal.
libasan=$(gcc -print-file-name=libasan.so)
[ -f "$libasan" ] || { echo "libasan not found (gcc -print-file-name=libasan.so)"; exit 1; }
logdir=$(mktemp -d)
export LD_PRELOAD=$libasan
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_odr_violation=0:log_path=$logdir/asan"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$logdir/ubsan"
export RDMAJS_SANITIZE_ADDON=$addon
export NODE_OPTIONS="--require $root/scripts/lanes/sanitize-load.cjs ${NODE_OPTIONS:-}"
export RDMAJS_TEST_PROVIDERS=soft

echo "=== sanitize lane: verbs tests (soft) under ASan + UBSan"
start=$(date +%s)
set +e
node "$root/node_modules/vitest/vitest.mjs" run --project verbs "$@"
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

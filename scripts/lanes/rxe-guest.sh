#!/bin/sh
# Runs inside the rxe VM (scripts/rxe/run.sh), in the repository root: the ibverbs
# provider against the kernel's Soft-RoCE device rxe0.
set -e
step() { echo "=== rxe lane: $*"; }

step "rdmajs devices (rxe0 with its ports and GIDs)"
node packages/verbs/bin/rdmajs.js devices > /tmp/devices.txt
cat /tmp/devices.txt
grep -q 'hca_id:.rxe0' /tmp/devices.txt || { echo "rxe0 missing from rdmajs devices"; exit 1; }
grep -q 'provider: *ibverbs' /tmp/devices.txt

step "verbs conformance suite on ibverbs (rxe0)"
# Emulation is ~10x slower than the host: longer per-test deadlines than the default 5 s.
RDMAJS_TEST_PROVIDERS=ibverbs node node_modules/vitest/vitest.mjs run --project verbs --testTimeout=120000

step "verbs ping-pong bench on ibverbs (emulated VM: timings are not performance figures)"
node --conditions=@rdmajs/source --import tsx apps/bench/src/cli.ts verbs-pingpong \
  --provider ibverbs --iterations 200 --sizes 64,4k,64k,1m --json /tmp/bench-ibverbs.json
node -e '
  const r = JSON.parse(require("fs").readFileSync("/tmp/bench-ibverbs.json", "utf8"));
  const ib = r.results.filter((x) => x.transport === "ibverbs");
  if (ib.length < 9) throw new Error("expected 9 ibverbs results, got " + ib.length);
  console.log("bench: " + ib.length + " ibverbs results");
'
step "done"

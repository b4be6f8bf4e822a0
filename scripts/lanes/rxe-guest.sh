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

step "rdmajs doctor --provider ibverbs (rxe0: ACTIVE port, RoCE v2 GID, modules, a real registration)"
doctor="node packages/verbs/bin/rdmajs.js doctor --provider ibverbs"
$doctor
$doctor --json | node scripts/lanes/doctor-expect.mjs ok \
  modules=ok port=ok gid=ok mtu=ok memlock=ok probe=ok

step "rdmajs doctor with ulimit -l 64 as an unprivileged user (no CAP_IPC_LOCK)"
# 16 MiB to register (the default) cannot be pinned under 64 KiB: doctor must say so and
# exit 1; 32 KiB fits, and doctor's probe really registers it as that user.
rc=0
(ulimit -l 64 && exec node scripts/lanes/as-nobody.mjs $doctor --json) > /tmp/doctor-low.json || rc=$?
[ "$rc" = 1 ] || { echo "doctor exited $rc under ulimit -l 64, expected 1"; exit 1; }
node scripts/lanes/doctor-expect.mjs fail memlock=fail < /tmp/doctor-low.json
(ulimit -l 64 && exec node scripts/lanes/as-nobody.mjs $doctor --register 32k --json) |
  node scripts/lanes/doctor-expect.mjs ok memlock=ok probe=ok
# ...and the verdict is the kernel's: registering 16 MiB there is refused with ENOMEM.
rc=0
(ulimit -l 64 && exec node scripts/lanes/as-nobody.mjs node scripts/lanes/register.mjs 16777216) || rc=$?
[ "$rc" = 3 ] || { echo "registering 16 MiB under ulimit -l 64 exited $rc, expected 3 (ENOMEM)"; exit 1; }

step "verbs conformance suite on ibverbs (rxe0)"
# Emulation is ~10x slower than the host: longer per-test deadlines than the default 5 s.
RDMAJS_TEST_PROVIDERS=ibverbs node node_modules/vitest/vitest.mjs run --project verbs --testTimeout=120000

step "verbs ping-pong bench on ibverbs (emulated VM: timings are not performance figures)"
node --conditions=@rdmajs/source --import tsx apps/bench/src/cli.ts verbs-pingpong \
  --provider ibverbs --iterations 200 --rounds 1 --sizes 64,4k,64k,1m --json /tmp/bench-ibverbs.json
node -e '
  const r = JSON.parse(require("fs").readFileSync("/tmp/bench-ibverbs.json", "utf8"));
  const ib = r.results.filter((x) => x.transport === "ibverbs");
  if (ib.length < 9) throw new Error("expected 9 ibverbs results, got " + ib.length);
  console.log("bench: " + ib.length + " ibverbs results");
'
step "done"

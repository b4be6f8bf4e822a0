#!/usr/bin/env bash
# Packages as a user gets them: `pnpm pack` of every publishable package, installed with
# npm into an empty project outside the workspace, offline (workspace packages from the
# tarballs only, third-party ones from the npm cache), then `rdmajs devices`, `rdmajs
# doctor` and a SEND ping-pong between two processes on soft, through the public API.
# Two installs: one builds the addons (verbs, ps-server kernels) from source
# (--build-from-source), one takes the prebuilt linux-x64 binaries from the tarballs. Needs `pnpm build` first (dist/ is packed).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/rdmajs-pack-install.XXXXXX)"
trap 'rm -rf "$work"' EXIT
step() { echo "=== pack-install: $*"; }
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

step "pnpm pack every publishable package"
mkdir -p "$work/tarballs"
mapfile -t pkgs < <(node "$repo/scripts/publishable.mjs")
for p in "${pkgs[@]}"; do
  (cd "$repo/$p" && pnpm pack --pack-destination "$work/tarballs" >/dev/null)
done
ls "$work/tarballs"

# The consumer project: every @rdmajs package a dependency and an override, so each
# reference (also between our packages) resolves to its tarball and never to a registry.
node -e '
  const fs = require("fs"), path = require("path");
  const [dir, out] = process.argv.slice(1);
  const deps = {};
  for (const t of fs.readdirSync(dir)) {
    const name = t.replace(/^rdmajs-(.*)-\d+\.\d+\.\d+.*\.tgz$/, "@rdmajs/$1");
    deps[name] = "file:" + path.join(dir, t);
  }
  fs.writeFileSync(out, JSON.stringify({ name: "consumer", private: true, type: "module",
    dependencies: deps, overrides: deps }, null, 2));
' "$work/tarballs" "$work/package.json"
cat "$work/package.json" && echo

step "warm the npm cache with the third-party dependencies (the registry is the only network)"
mkdir "$work/warm" && cp "$work/package.json" "$work/warm/"
(cd "$work/warm" && npm install --ignore-scripts --prefer-offline --no-package-lock >/dev/null)

consumer() { # <name> [npm install flags...]: an empty project with the tarballs installed offline
  local dir="$work/$1"; shift
  mkdir "$dir" && cp "$work/package.json" "$dir/"
  if ! (cd "$dir" && npm install --offline --foreground-scripts "$@") >"$dir.log" 2>&1; then
    tail -40 "$dir.log"
    exit 1
  fi
  grep '^@rdmajs' "$dir.log" || true
  test -e "$dir/node_modules/@rdmajs/verbs/build/Release/rdmajs_verbs.node" || { echo "no addon in $1"; exit 1; }
  test -e "$dir/node_modules/@rdmajs/ps-server/build/Release/rdmajs_ps_kernels.node" || { echo "no ps-server kernels addon in $1"; exit 1; }
  # Nothing of ours may come from anywhere but the tarballs.
  node -e '
    const lock = require(process.argv[1]);
    for (const [k, v] of Object.entries(lock.packages))
      if (k.includes("node_modules/@rdmajs/") && !String(v.resolved).startsWith("file:"))
        throw new Error(k + " resolved to " + v.resolved);
  ' "$dir/package-lock.json"
  cp "$repo/scripts/pack-install/pingpong.mjs" "$repo/scripts/pack-install/tcp-echo.mjs" \
    "$repo/scripts/pack-install/ps-roundtrip.mjs" "$dir/"
}

check() { # <dir>: the CLI and the ping-pong from the installed packages
  (cd "$work/$1" &&
    npx --offline rdmajs devices | grep -q 'provider: *soft' &&
    npx --offline rdmajs doctor --provider soft &&
    node pingpong.mjs 200 &&
    node -e 'import("@rdmajs/allocator").then(m => { if (!m.RegisteredAllocator) process.exit(1) })' &&
    node -e 'import("@rdmajs/flowctl").then(m => { if (!m.SendWindow) process.exit(1) })' &&
    node -e 'import("@rdmajs/socket-reads").then(m => { if (typeof m.adoptAccepted !== "function") process.exit(1) })' &&
    node -e 'import("@rdmajs/rpc-recovery").then(m => { const t = new m.DeduplicationTable(); t.openSession("a"); new m.DeduplicationTable().restore(t.save()) })' &&
    node -e 'import("@rdmajs/ps-server").then(async (m) => {
      const s = new m.ParameterStore({ tables: [{ name: "t", dim: 2, optimizer: { kind: "sum" } }] });
      await s.push("t", BigUint64Array.of(7n), Float32Array.of(1, 2), { session: "a", seq: 1 });
      const out = new Float32Array(2);
      s.pullInto("t", BigUint64Array.of(7n), out);
      if (out[0] !== 1 || out[1] !== 2) process.exit(1);
    })' &&
    node tcp-echo.mjs &&
    npx --offline rdmajs-ps-server --help | grep -q -- '--secret-file' &&
    node ps-roundtrip.mjs)
}

step "install offline, addon built from source"
consumer from-source --build-from-source
test -e "$work/from-source/node_modules/@rdmajs/verbs/build/Makefile" || { echo "the addon was not compiled"; exit 1; }
test -e "$work/from-source/node_modules/@rdmajs/ps-server/build/Makefile" || { echo "the ps-server kernels were not compiled"; exit 1; }
grep -q '"haveIbverbs":true' "$work/from-source/node_modules/@rdmajs/verbs/build/config-stamp.json" ||
  echo "(built without the ibverbs provider: no libibverbs headers)"
check from-source

step "install offline, prebuilt addon from the tarball"
consumer prebuilt
test ! -e "$work/prebuilt/node_modules/@rdmajs/verbs/build/Makefile" || { echo "compiled instead of using the prebuilt addon"; exit 1; }
test ! -e "$work/prebuilt/node_modules/@rdmajs/ps-server/build/Makefile" || { echo "compiled the ps-server kernels instead of using the prebuilt addon"; exit 1; }
check prebuilt
step "ok"

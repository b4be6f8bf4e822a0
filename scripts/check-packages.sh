#!/usr/bin/env bash
# publint (strict) and @arethetypeswrong/cli on the tarball of every publishable package,
# as `pnpm pack` makes it (publishConfig applied, workspace: ranges replaced). The
# packages are ESM only, so attw checks the esm-only profile (node16 from ESM, bundler).
# Needs `pnpm build` first.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d /tmp/rdmajs-check-packages.XXXXXX)"
trap 'rm -rf "$out"' EXIT
cd "$repo"
mapfile -t pkgs < <(node scripts/publishable.mjs)
for p in "${pkgs[@]}"; do
  (cd "$p" && pnpm pack --pack-destination "$out" >/dev/null)
done
for t in "$out"/*.tgz; do
  publint --strict "$t"
  attw --profile esm-only --format table "$t"
done

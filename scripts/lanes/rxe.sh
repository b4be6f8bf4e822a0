#!/usr/bin/env bash
# The rxe lane (`pnpm test:rxe`): boots the Soft-RoCE VM and runs rxe-guest.sh in it.
# Build the project on the host first (`pnpm build`): the VM runs the host's build.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec bash scripts/rxe/run.sh sh scripts/lanes/rxe-guest.sh

#!/usr/bin/env bash
# rxe lane: run a command inside a qemu VM whose kernel provides Soft-RoCE (rdma_rxe),
# so libibverbs code runs against a real kernel RDMA provider (device rxe0 on eth0).
#
# Usage: scripts/rxe/run.sh [--] <command> [args...]
#   The command runs as root in the guest, in the repository root, which is the host's
#   repository shared read-write over 9p at the same absolute path. Exit code = the
#   command's; 124 = timeout; 125 = the VM never reported one (boot/setup failure).
#
# Env (host):
#   RXE_TIMEOUT=1200      overall limit in seconds (image build excluded)
#   RXE_MEM=3G RXE_SMP=2  guest memory / vCPUs;  RXE_CPU=max  TCG CPU model
#   RXE_PASS_ENV="A B"    host variables to pass into the guest (CI, NO_COLOR always are)
#   RXE_SELFTEST=1        run ibv_rc_pingpong on rxe0 before the command
#   RXE_9P_CACHE=loose    9p cache mode of the repo share (loose|mmap|none)
#   RXE_CACHE_DIR=<repo>/.rxe-cache  image, downloaded .debs, console logs (logs/last.log)
#   RXE_NODE=$(command -v node)      node binary copied into the image
set -euo pipefail
shopt -s extglob
export PATH=$PATH:/usr/sbin:/sbin

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/../.." && pwd -P)
CACHE=${RXE_CACHE_DIR:-$REPO/.rxe-cache}
TIMEOUT=${RXE_TIMEOUT:-1200}
MEM=${RXE_MEM:-3G}
SMP=${RXE_SMP:-2}
CPU=${RXE_CPU:-max}

log() { echo "[rxe] $*" >&2; }
now_us() { local t=${EPOCHREALTIME}; echo "${t/./}"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b-a)/1e6}'; }
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; } # POSIX-sh single quoting

usage() { sed -n '2,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  --) shift ;;
esac
[ $# -gt 0 ] || { usage >&2; exit 2; }
T0=$(now_us)

# ------------------------------------------------------------------ host prerequisites
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
# busybox goes into the guest, so it must be the static build (ldd fails on it)
if ! { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 && /bin/busybox --list | grep -qx cpio; }; then
  need+=(busybox-static)
fi
command -v depmod >/dev/null || need+=(kmod)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=
  [ "$(id -u)" = 0 ] || SUDO=sudo
  log "installing host prerequisites: ${need[*]}"
  mkdir -p "$CACHE"
  for try in $(seq 1 20); do # another apt/dpkg may hold the lock
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q -o DPkg::Lock::Timeout=60 \
      "${need[@]}" >"$CACHE/apt.log" 2>&1 && break
    [ "$try" = 20 ] && { cat "$CACHE/apt.log" >&2; log "ERROR: apt-get install ${need[*]} failed"; exit 125; }
    log "apt-get install failed (dpkg lock?), retrying in 15 s"
    sleep 15
  done
fi

# ------------------------------------------------------------------ image (cached)
mkdir -p "$CACHE/logs" "$CACHE/runs"
OLD_IMAGES=$(ls -d "$CACHE"/image-* 2>/dev/null || true)
IMG=$(bash "$HERE/build-image.sh" "$CACHE") || { log "ERROR: image build failed"; exit 125; }
grep -qxF "$IMG" <<<"$OLD_IMAGES" && IMGT=cached || IMGT=built
T1=$(now_us)

# ------------------------------------------------------------------ per-run control share
RUN=$(mktemp -d "$CACHE/runs/run.XXXXXX")
CTL=$RUN/ctl
mkdir -p "$CTL"
cleanup() { rm -rf "$RUN"; }
PIPE_PID=
on_signal() {
  [ -f "$RUN/qemu.pid" ] && kill "$(cat "$RUN/qemu.pid")" 2>/dev/null
  [ -n "$PIPE_PID" ] && wait "$PIPE_PID" 2>/dev/null
  log "interrupted, VM killed"
  exit 130
}
trap cleanup EXIT
trap on_signal INT TERM HUP

{
  echo "RXE_REPO=$(sq "$REPO")"
  echo "RXE_9P_CACHE=$(sq "${RXE_9P_CACHE:-loose}")"
  echo "RXE_SELFTEST=$(sq "${RXE_SELFTEST:-0}")"
} >"$CTL/config.sh"
{
  echo "cd $(sq "$REPO") || exit 126"
  echo "export HOME=/root"
  echo "export PATH=$(sq "$REPO/node_modules/.bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")"
  for name in CI NO_COLOR ${RXE_PASS_ENV:-}; do
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { log "ERROR: bad name in RXE_PASS_ENV: $name"; exit 2; }
    [ -n "${!name+x}" ] && echo "export $name=$(sq "${!name}")"
  done
  printf 'exec'
  for a in "$@"; do printf ' %s' "$(sq "$a")"; done
  echo
} >"$CTL/cmd.sh"

LOG=$CACHE/logs/$(date +%Y%m%d-%H%M%S)-$$.log
ln -sfn "$(basename "$LOG")" "$CACHE/logs/last.log"
{ ls -1t "$CACHE"/logs/*-*.log 2>/dev/null || true; } | tail -n +20 | xargs -r rm -f # keep 20 logs

esc_opt() { printf '%s' "${1//,/,,}"; } # qemu option values double their commas
QEMU=(
  qemu-system-x86_64 -accel tcg -cpu "$CPU" -m "$MEM" -smp "$SMP"
  -nographic -no-reboot -pidfile "$RUN/qemu.pid"
  -kernel "$IMG/vmlinuz" -initrd "$IMG/initrd.gz"
  -append "console=ttyS0 quiet loglevel=3 panic=-1 oops=panic"
  # slirp without IPv6: no router advertisement adding a late SLAAC GID to rxe0, so the
  # GID table is fixed (0: fe80::..., 1: ::ffff:10.0.2.15); no iPXE option ROM
  -netdev user,id=net0,ipv6=off -device virtio-net-pci,netdev=net0,romfile=
  -virtfs "local,path=$(esc_opt "$REPO"),mount_tag=repo,security_model=none,multidevs=remap"
  -virtfs "local,path=$(esc_opt "$CTL"),mount_tag=rxectl,security_model=none"
)

# console filter: drop \r, drop the firmware's terminal escapes until the command starts
# (the command's own output passes untouched), note host times of the markers
filter() {
  local line started=0
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%$'\r'}
    if [ $started = 0 ]; then
      line=${line//$'\e'c/}
      line=${line//$'\e'\[*([?0-9;])[a-zA-Z]/}
    fi
    case $line in
      *"=== RXE-LANE COMMAND START"*) started=1; echo "$EPOCHREALTIME" >"$RUN/t_start" ;;
      *"=== RXE-LANE EXIT "*) started=0; echo "$EPOCHREALTIME" >"$RUN/t_exit" ;;
    esac
    printf '%s\n' "$line"
  done
}

log "booting VM (TCG -cpu $CPU -smp $SMP -m $MEM, timeout ${TIMEOUT}s), console log: $LOG"
(
  set +e
  timeout --foreground -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 | filter | tee "$LOG"
  echo "${PIPESTATUS[0]}" >"$RUN/qemu.rc"
) &
PIPE_PID=$!
wait "$PIPE_PID" || true
T2=$(now_us)
QRC=$(cat "$RUN/qemu.rc" 2>/dev/null || echo '?')

# ------------------------------------------------------------------ verdict
us() { local t; t=$(cat "$1" 2>/dev/null) && echo "${t/./}"; }
TS=$(us "$RUN/t_start" || true)
TE=$(us "$RUN/t_exit" || true)
SUMMARY="image $IMGT $(secs "$T0" "$T1")s"
[ -n "$TS" ] && SUMMARY+=", boot $(secs "$T1" "$TS")s"
[ -n "$TS" ] && [ -n "$TE" ] && SUMMARY+=", command $(secs "$TS" "$TE")s"
SUMMARY+=", total $(secs "$T0" "$T2")s"

if [ -f "$CTL/rc" ]; then
  RC=$(cat "$CTL/rc")
  log "command exited $RC ($SUMMARY)"
  exit "$RC"
fi
if [ -f "$CTL/setup-failed" ]; then
  log "ERROR: VM setup failed before the command ran: $(cat "$CTL/setup-failed") ($SUMMARY; log $LOG)"
elif [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
  log "ERROR: timed out after ${TIMEOUT}s (RXE_TIMEOUT), VM killed ($SUMMARY; log $LOG)"
  exit 124
elif grep -q 'Kernel panic' "$LOG"; then
  log "ERROR: guest kernel panic, no exit code reported ($SUMMARY; log $LOG)"
else
  log "ERROR: VM exited (qemu rc=$QRC) without reporting an exit code ($SUMMARY; log $LOG)"
fi
exit 125

#!/bin/sh
# Guest /init of the rxe lane (copied into the initramfs by build-image.sh; busybox ash).
# Sets up Soft-RoCE (rxe0 on eth0), mounts the repository over 9p at its host path, runs
# the command that run.sh wrote to the control share, reports its exit code, powers off.
#
# Control share (9p tag rxectl, mounted at /rxe-ctl), written by run.sh on the host:
#   config.sh  RXE_REPO=<repo root>, RXE_9P_CACHE, RXE_SELFTEST
#   cmd.sh     cd <repo>; export ...; exec <command...>   (every word single-quoted)
# Written back by this script: rc (exit code of the command) or setup-failed (reason).
/bin/busybox --install -s
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
dmesg -n 1 # keep kernel messages off the console (they stay in dmesg)

up() { cut -d' ' -f1 /proc/uptime; }
mark() { echo "=== RXE-LANE $* [guest t=$(up)s]"; }
halt() {
  kill -TERM -1 2>/dev/null; sleep 0.2; kill -KILL -1 2>/dev/null
  sync
  [ -n "$RXE_REPO" ] && umount "$RXE_REPO" 2>/dev/null
  umount /rxe-ctl 2>/dev/null
  poweroff -f
}
fail() {
  mark "SETUP FAILED: $*"
  echo "--- dmesg (tail)"; dmesg | tail -n 30
  echo "$*" > /rxe-ctl/setup-failed 2>/dev/null
  halt
}

mark "BOOT (kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) cpus, $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) MiB)"
mkdir -p /dev/pts /dev/shm /tmp /run /rxe-ctl
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd 2>/dev/null

while read -r ko; do
  insmod "$ko" || fail "insmod $ko"
done < /etc/modules.order

P9="trans=virtio,version=9p2000.L,msize=512000"
mount -t 9p -o "$P9,cache=none" rxectl /rxe-ctl || fail "mount control share"
. /rxe-ctl/config.sh || fail "read /rxe-ctl/config.sh"
mkdir -p "$RXE_REPO"
mount -t 9p -o "$P9,cache=${RXE_9P_CACHE:-loose}" repo "$RXE_REPO" || fail "mount repo share at $RXE_REPO"

ip link set lo up
echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad
for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /sys/class/net/eth0 ] && break; sleep 0.5; done
[ -e /sys/class/net/eth0 ] || fail "no eth0"
echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2

rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 type rxe netdev eth0"
ibv_devices | grep -qw rxe0 || { ibv_devices; fail "ibv_devices does not list rxe0"; }
for i in $(seq 1 40); do
  ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE && break
  sleep 0.25
done
ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || { ibv_devinfo -d rxe0; fail "rxe0 port 1 not ACTIVE"; }
mark "rxe0 ready ($(rdma link show rxe0/1 | sed 's/^link //'))"

if [ "$RXE_SELFTEST" = 1 ]; then
  timeout 60 ibv_rc_pingpong -d rxe0 -g 0 -n 100 > /tmp/pp-server.log 2>&1 &
  sleep 1
  timeout 60 ibv_rc_pingpong -d rxe0 -g 0 -n 100 10.0.2.15 || { cat /tmp/pp-server.log; fail "ibv_rc_pingpong"; }
  wait
  mark "SELFTEST ibv_rc_pingpong OK"
fi

mark "COMMAND START"
# stdout is a pipe, not the serial tty (no tty-only output, no \n -> \r\n surprises).
{ sh /rxe-ctl/cmd.sh </dev/null 2>&1; echo $? > /tmp/.rxe-rc; } | cat
rc=$(cat /tmp/.rxe-rc 2>/dev/null || echo 255)
echo "$rc" > /rxe-ctl/rc
mark "EXIT $rc"
halt

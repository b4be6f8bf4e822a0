#!/usr/bin/env bash
# Build (or reuse) the rxe-lane VM image: Debian's stock kernel + the modules Soft-RoCE
# and 9p need, rdma-core userspace (libibverbs, librdmacm, the rxe provider,
# ibverbs-utils, iproute2's `rdma`), static busybox, and the host's node binary.
#
# Usage: build-image.sh <cache-dir>      prints the image directory (vmlinuz, initrd.gz)
# The image lives in <cache-dir>/image-<key>; <key> hashes everything that goes in:
# this script, init.sh, the Debian package versions apt would pick, and the node binary.
# Same key -> nothing is rebuilt. Older images are removed after a successful build.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
CACHE=${1:?usage: build-image.sh <cache-dir>}
ARCH_LIB=x86_64-linux-gnu
log() { echo "[rxe] $*" >&2; }
die() { echo "[rxe] ERROR: $*" >&2; exit 1; }
now_us() { local t=${EPOCHREALTIME}; echo "${t/./}"; }

NODE_BIN=$(readlink -f "${RXE_NODE:-$(command -v node || echo /usr/bin/node)}")
[ -x "$NODE_BIN" ] || die "node not found (set RXE_NODE)"

# ------------------------------------------------------------------ what goes in
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[ -n "$KPKG" ] || die "cannot resolve the kernel package behind linux-image-amd64 (apt-get update?)"
PKGS=(
  "$KPKG"
  libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 iproute2
  # runtime libraries of the above and of node: ldd below fails loudly if one is missing
  libnl-3-200 libnl-route-3-200 libmnl0 libcap2 libbsd0 libmd0 libc6 libgcc-s1 libstdc++6
)
# "<package> <version> <arch> <pool path>" for the candidate version of each package
PKGLIST=$(apt-cache show --no-all-versions "${PKGS[@]}" 2>/dev/null |
  awk '/^Package:/{p=$2} /^Version:/{v=$2} /^Architecture:/{a=$2} /^Filename:/{f=$2} /^$/{if(p)print p, v, a, f; p=""}' | sort -u)
for p in "${PKGS[@]}"; do
  grep -q "^$p " <<<"$PKGLIST" || die "apt knows no package $p (apt-get update?)"
done
KEY=$( {
  sha256sum "$HERE/build-image.sh" "$HERE/init.sh" | cut -d' ' -f1
  echo "$PKGLIST"
  stat -c '%n %s %Y' "$NODE_BIN"
} | sha256sum | cut -c1-16)
IMG=$CACHE/image-$KEY
if [ -f "$IMG/initrd.gz" ] && [ -f "$IMG/vmlinuz" ]; then
  echo "$IMG"
  exit 0
fi

# one build at a time; whoever waited may find the image already built
mkdir -p "$CACHE"
exec 9>"$CACHE/build.lock"
flock 9
if [ -f "$IMG/initrd.gz" ]; then echo "$IMG"; exit 0; fi

T0=$(now_us)
log "building image $KEY (kernel $KPKG, node $("$NODE_BIN" --version))"
B=$CACHE/build
rm -rf "$B"
mkdir -p "$B"/{kroot,pkgroot,initrd} "$CACHE/debs"

# ------------------------------------------------------------------ packages
# .debs are kept in <cache>/debs (pruned to the current set); apt's own archive is
# used when it already holds the file.
# (apt names downloads <pkg>_<epoch>%3a<version>_<arch>.deb: renamed to the pool name)
need=()
keep=()
declare -A want=()
while read -r p v a f; do
  deb=$(basename "$f")
  keep+=("$deb")
  [ -f "$CACHE/debs/$deb" ] && continue
  if [ -f "/var/cache/apt/archives/$deb" ]; then
    cp "/var/cache/apt/archives/$deb" "$CACHE/debs/"
  else
    need+=("$p=$v")
    want[$p]=$deb
  fi
done <<<"$PKGLIST"
if [ ${#need[@]} -gt 0 ]; then
  log "downloading ${#need[@]} packages: ${need[*]}"
  DL=$CACHE/debs/.download
  rm -rf "$DL"
  mkdir -p "$DL"
  (cd "$DL" && apt-get download -q -o APT::Sandbox::User=root "${need[@]}" >/dev/null) ||
    die "apt-get download failed"
  for p in "${!want[@]}"; do
    got=("$DL/${p}_"*.deb)
    [ -f "${got[0]}" ] || die "apt-get download produced no .deb for $p"
    mv "${got[0]}" "$CACHE/debs/${want[$p]}"
  done
  rm -rf "$DL"
fi
for d in "$CACHE"/debs/*.deb; do
  printf '%s\n' "${keep[@]}" | grep -qxF "$(basename "$d")" || rm -f "$d"
done
for deb in "${keep[@]}"; do
  case $deb in
    linux-image-*) dpkg -x "$CACHE/debs/$deb" "$B/kroot" ;;
    *) dpkg -x "$CACHE/debs/$deb" "$B/pkgroot" ;;
  esac
done
KV=$(ls "$B/kroot/lib/modules")
depmod -b "$B/kroot" "$KV" # the .deb ships no modules.dep (its postinst makes it)

# ------------------------------------------------------------------ initramfs tree
R=$B/initrd
P=$B/pkgroot
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,etc/libibverbs.d,proc,sys,dev,tmp,run,root,lib64,rxe-ctl} \
  "$R/lib/$ARCH_LIB" "$R/usr/lib/$ARCH_LIB/libibverbs"
if [ "$(id -u)" = 0 ]; then
  mknod -m 600 "$R/dev/console" c 5 1
  mknod -m 666 "$R/dev/null" c 1 3
fi
cp /bin/busybox "$R/bin/busybox"
ln -s busybox "$R/bin/sh"
cp "$HERE/init.sh" "$R/init"
chmod 755 "$R/init"

# kernel modules in dependency order (crc32_generic must precede rdma_rxe)
MODS=(virtio_pci virtio_net crc32_generic rdma_rxe 9pnet_virtio 9p)
: >"$R/etc/modules.order"
for m in "${MODS[@]}"; do
  modprobe -d "$B/kroot" -S "$KV" --show-depends "$m"
done | awk '$1=="insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
  rel=${ko#"$B/kroot"}
  mkdir -p "$R$(dirname "$rel")"
  cp "$ko" "$R$rel"
  echo "$rel" >>"$R/etc/modules.order"
done
[ -s "$R/etc/modules.order" ] || die "no kernel modules resolved"

# userspace
BINS=("$P"/usr/bin/ibv_* "$P/usr/bin/rdma")
cp "${BINS[@]}" "$R/usr/bin/"
RXE_SO=$(ls "$P/usr/lib/$ARCH_LIB/libibverbs/"librxe-rdmav*.so)
cp "$RXE_SO" "$R/usr/lib/$ARCH_LIB/libibverbs/"
cp "$P/etc/libibverbs.d/rxe.driver" "$R/etc/libibverbs.d/"
cp "$NODE_BIN" "$R/usr/bin/node"
ELFS=("${BINS[@]}" "$RXE_SO" "$P/usr/lib/$ARCH_LIB/librdmacm.so.1" "$NODE_BIN")

# shared libraries, resolved with ldd, preferring the downloaded packages over the host
LDP="$P/usr/lib/$ARCH_LIB:$P/lib/$ARCH_LIB"
for e in "${ELFS[@]}"; do LD_LIBRARY_PATH=$LDP ldd "$e"; done >"$B/ldd.txt"
if grep -q 'not found' "$B/ldd.txt"; then
  grep 'not found' "$B/ldd.txt" | sort -u >&2
  die "missing shared libraries (add their packages to PKGS in build-image.sh)"
fi
{ awk '$2=="=>" && $3 ~ /^\// {print $1, $3}' "$B/ldd.txt"; echo "librdmacm.so.1 $P/usr/lib/$ARCH_LIB/librdmacm.so.1"; } |
  sort -u | while read -r soname path; do
    case $path in "$P"/*) ;; *) log "note: $soname taken from the host ($path)" ;; esac
    cp -L "$path" "$R/lib/$ARCH_LIB/$soname"
  done
# every shared library of the downloaded packages as well (all of glibc: librt,
# libresolv, ... are needed by prebuilt addons such as rolldown's binding)
for f in "$P/lib/$ARCH_LIB"/lib*.so* "$P/usr/lib/$ARCH_LIB"/lib*.so*; do
  [ -e "$R/lib/$ARCH_LIB/${f##*/}" ] || cp -a "$f" "$R/lib/$ARCH_LIB/"
done
# unversioned names too, for code that dlopen()s "libibverbs.so" / "librdmacm.so"
ln -sf libibverbs.so.1 "$R/lib/$ARCH_LIB/libibverbs.so"
ln -sf librdmacm.so.1 "$R/lib/$ARCH_LIB/librdmacm.so"
cp -L "$P/lib/$ARCH_LIB/ld-linux-x86-64.so.2" "$R/lib/$ARCH_LIB/"
ln -s "../lib/$ARCH_LIB/ld-linux-x86-64.so.2" "$R/lib64/ld-linux-x86-64.so.2"

# minimal /etc: getpwuid (os.userInfo), localhost resolution, slirp DNS
echo 'root:x:0:0:root:/root:/bin/sh' >"$R/etc/passwd"
echo 'root:x:0:' >"$R/etc/group"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.0.2.15\trxe-vm\n' >"$R/etc/hosts"
echo 'rxe-vm' >"$R/etc/hostname"
echo 'nameserver 10.0.2.3' >"$R/etc/resolv.conf"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$R/etc/nsswitch.conf"

# ------------------------------------------------------------------ pack
NEW=$CACHE/.image-$KEY.tmp
rm -rf "$NEW"
mkdir -p "$NEW"
cp "$B/kroot/boot/vmlinuz-$KV" "$NEW/vmlinuz"
(cd "$R" && find . | sort | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) | gzip -1 >"$NEW/initrd.gz"
{
  echo "key $KEY"
  echo "kernel $KV"
  echo "node $NODE_BIN $("$NODE_BIN" --version)"
  echo "modules $(tr '\n' ' ' <"$R/etc/modules.order")"
  echo "$PKGLIST"
} >"$NEW/manifest.txt"
for old in "$CACHE"/image-*; do [ -d "$old" ] && rm -rf "$old"; done
mv "$NEW" "$IMG"
rm -rf "$B"
T1=$(now_us)
log "image built in $(awk -v a="$T0" -v b="$T1" 'BEGIN{printf "%.1f", (b-a)/1e6}') s: $(du -h "$IMG/initrd.gz" | cut -f1) initrd, kernel $KV"
echo "$IMG"

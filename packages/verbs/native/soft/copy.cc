#include "copy.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstring>

namespace soft {

void scatter_copy(const iovec* dst, size_t nd, const iovec* src, size_t ns) {
  size_t di = 0, si = 0, doff = 0, soff = 0;
  while (di < nd && si < ns) {
    size_t n = std::min(dst[di].iov_len - doff, src[si].iov_len - soff);
    // memmove: a loopback READ or WRITE may overlap its own source.
    if (n)
      std::memmove(static_cast<char*>(dst[di].iov_base) + doff, static_cast<const char*>(src[si].iov_base) + soff, n);
    doff += n;
    soff += n;
    if (doff == dst[di].iov_len) {
      di++;
      doff = 0;
    }
    if (soff == src[si].iov_len) {
      si++;
      soff = 0;
    }
  }
  // Acquire fence: this copy's loads of the source complete before any later load of this
  // thread, e.g. the next READ WR of the same QP. A seqlock reader posts "meta, row, meta"
  // as three READs and relies on RC's in-order execution (the row read before the second
  // meta); on a weakly ordered CPU (arm64) plain loads of separate memmoves could otherwise
  // be satisfied out of order. Free on x86-64 (a compiler barrier).
  std::atomic_thread_fence(std::memory_order_acquire);
}

void ordered_copy(const iovec& dst, const iovec* src, size_t ns) {
  if (dst.iov_len == 0) return;
  iovec head{dst.iov_base, dst.iov_len - 1};
  scatter_copy(&head, 1, src, ns);
  size_t last = ns;
  while (last > 0 && src[last - 1].iov_len == 0) last--;
  if (last == 0) return;
  const iovec& s = src[last - 1];
  std::atomic_thread_fence(std::memory_order_release);
  static_cast<volatile char*>(dst.iov_base)[dst.iov_len - 1] = static_cast<const char*>(s.iov_base)[s.iov_len - 1];
}

namespace {

size_t total(const iovec* v, size_t n) {
  size_t t = 0;
  for (size_t i = 0; i < n; i++) t += v[i].iov_len;
  return t;
}

CopyResult vm_result(ssize_t n, size_t want) {
  if (n == static_cast<ssize_t>(want)) return COPY_OK;
  return n < 0 && (errno == EPERM || errno == ESRCH) ? COPY_UNREACHABLE : COPY_FAULT;
}

}  // namespace

CopyResult copy_to_peer(pid_t peer, const iovec* local, size_t nl, const iovec* remote, size_t nr) {
  size_t want = total(local, nl);
  if (want == 0) return COPY_OK;
  if (peer == getpid()) {
    scatter_copy(remote, nr, local, nl);
    return COPY_OK;
  }
  return vm_result(process_vm_writev(peer, local, nl, remote, nr, 0), want);
}

CopyResult copy_from_peer(pid_t peer, const iovec* local, size_t nl, const iovec* remote, size_t nr) {
  size_t want = total(local, nl);
  if (want == 0) return COPY_OK;
  if (peer == getpid()) {
    scatter_copy(local, nl, remote, nr);
    return COPY_OK;
  }
  CopyResult r = vm_result(process_vm_readv(peer, local, nl, remote, nr, 0), want);
  // As scatter_copy: what this READ read is read before whatever the next one reads.
  std::atomic_thread_fence(std::memory_order_acquire);
  return r;
}

}  // namespace soft

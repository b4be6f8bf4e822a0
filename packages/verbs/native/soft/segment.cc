#include "segment.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

namespace soft {

namespace {
long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
constexpr uint64_t kAlign = 64;
uint64_t align_up(uint64_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }
}  // namespace

void seal_size(int fd) {
  // Best effort: without sealing support peers refuse to map the memory directly and use
  // cross-memory attach, which the kernel bounds-checks.
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
}

namespace {
bool sealed_at_least(int fd, uint64_t length) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & F_SEAL_SHRINK) && fstat(fd, &st) == 0 && st.st_size >= 0 &&
         static_cast<uint64_t>(st.st_size) >= length;
}
}  // namespace

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(f, s);
  return s;
}

OwnSegment::OwnSegment() {
  memfd_ = static_cast<int>(syscall(SYS_memfd_create, "rdmajs-soft-device", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (memfd_ < 0) throw SysError{"memfd_create", errno};
  if (ftruncate(memfd_, static_cast<off_t>(kSegmentBytes)) != 0) {
    int e = errno;
    close(memfd_);
    throw SysError{"ftruncate", e};
  }
  seal_size(memfd_);
  void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(memfd_);
    throw SysError{"mmap", e};
  }
  base_ = static_cast<uint8_t*>(p);
  eventfd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (eventfd_ < 0) {
    int e = errno;
    munmap(base_, kSegmentBytes);
    close(memfd_);
    throw SysError{"eventfd", e};
  }
  auto* h = new (base_) SegmentHeader();
  h->magic = kMagic;
  h->version = kLayoutVersion;
  h->pid = static_cast<uint32_t>(getpid());
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h->alive, &attr);
  pthread_mutexattr_destroy(&attr);
  pthread_mutex_lock(&h->alive);
  h->mrSlots = kMrSlots;
  h->qpSlots = kQpSlots;
  h->mrTableOff = align_up(sizeof(SegmentHeader));
  h->qpTableOff = align_up(h->mrTableOff + sizeof(MrEntry) * kMrSlots);
  h->heapOff = align_up(h->qpTableOff + sizeof(QpShared) * kQpSlots);
  h->segmentBytes = kSegmentBytes;
  layout_ = Layout{h->mrTableOff, h->qpTableOff, h->heapOff, h->mrSlots, h->qpSlots};
  std::string b = boot_id();
  std::strncpy(h->bootId, b.c_str(), sizeof(h->bootId) - 1);
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, 0) != sizeof r)
    r = static_cast<uint64_t>(now_ns()) ^ (static_cast<uint64_t>(getpid()) << 20);
  h->nonce = (r & ((1ull << 48) - 1)) | 1;
  h->procView = proc_view();
  capBlocks_ = 64;
  blocks_ = static_cast<Block*>(std::malloc(sizeof(Block) * capBlocks_));
  blocks_[0] = Block{h->heapOff, kSegmentBytes - h->heapOff, false};
  nblocks_ = 1;
}

OwnSegment::~OwnSegment() {
  retire();
  munmap(base_, kSegmentBytes);
  close(memfd_);
  close(eventfd_);
  std::free(blocks_);
}

void OwnSegment::retire() {
  if (retired_) return;
  retired_ = true;
  header()->dead.store(1, std::memory_order_release);
  pthread_mutex_unlock(&header()->alive);
}

uint64_t OwnSegment::alloc(uint64_t bytes) {
  bytes = align_up(bytes == 0 ? kAlign : bytes);
  for (size_t i = 0; i < nblocks_; i++) {
    Block& b = blocks_[i];
    if (b.used || b.bytes < bytes) continue;
    if (b.bytes > bytes) {
      if (nblocks_ == capBlocks_) {
        capBlocks_ *= 2;
        blocks_ = static_cast<Block*>(std::realloc(blocks_, sizeof(Block) * capBlocks_));
      }
      std::memmove(&blocks_[i + 2], &blocks_[i + 1], sizeof(Block) * (nblocks_ - i - 1));
      blocks_[i + 1] = Block{blocks_[i].off + bytes, blocks_[i].bytes - bytes, false};
      nblocks_++;
      blocks_[i].bytes = bytes;
    }
    blocks_[i].used = true;
    std::memset(base_ + blocks_[i].off, 0, bytes);
    return blocks_[i].off;
  }
  return 0;
}

void OwnSegment::free(uint64_t off) {
  for (size_t i = 0; i < nblocks_; i++) {
    if (blocks_[i].off != off) continue;
    blocks_[i].used = false;
    // Coalesce with free neighbours; give the pages back to the kernel.
    if (i + 1 < nblocks_ && !blocks_[i + 1].used) {
      blocks_[i].bytes += blocks_[i + 1].bytes;
      std::memmove(&blocks_[i + 1], &blocks_[i + 2], sizeof(Block) * (nblocks_ - i - 2));
      nblocks_--;
    }
    if (i > 0 && !blocks_[i - 1].used) {
      blocks_[i - 1].bytes += blocks_[i].bytes;
      std::memmove(&blocks_[i], &blocks_[i + 1], sizeof(Block) * (nblocks_ - i - 1));
      nblocks_--;
    }
    return;
  }
}

PeerSegment::PeerSegment(pid_t pid, int remoteMemfd_, int remoteEventfd) : remoteMemfd(remoteMemfd_), pid_(pid) {
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd_ < 0) throw SysError{"pidfd_open", errno};
  int mfd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd_, remoteMemfd, 0));
  if (mfd < 0) {
    int e = errno;
    close(pidfd_);
    throw SysError{"pidfd_getfd", e};
  }
  eventfd_ = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd_, remoteEventfd, 0));
  if (eventfd_ < 0) {
    int e = errno;
    close(mfd);
    close(pidfd_);
    throw SysError{"pidfd_getfd", e};
  }
  // A stale endpoint may name an fd that is now some other file: check before mapping,
  // or touching the header would raise SIGBUS.
  struct stat st;
  if (fstat(mfd, &st) != 0 || st.st_size != static_cast<off_t>(kSegmentBytes) || !sealed_at_least(mfd, kSegmentBytes)) {
    close(mfd);
    close(eventfd_);
    close(pidfd_);
    throw SysError{"connect", ESTALE};
  }
  void* p = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  int e = errno;
  close(mfd);
  if (p == MAP_FAILED) {
    close(eventfd_);
    close(pidfd_);
    throw SysError{"mmap", e};
  }
  base_ = static_cast<uint8_t*>(p);
  // One snapshot of the peer's layout, checked: both tables inside the mapping, aligned,
  // in order, and no larger than this build's (an initiator indexes them by slot).
  const SegmentHeader* h = header();
  layout_ = Layout{h->mrTableOff, h->qpTableOff, h->heapOff, h->mrSlots, h->qpSlots};
  const Layout& L = layout_;
  bool sane = L.mrSlots >= 1 && L.mrSlots <= kMrSlots && L.qpSlots >= 1 && L.qpSlots <= kQpSlots &&
              L.mrTableOff >= sizeof(SegmentHeader) && L.mrTableOff % 64 == 0 && L.qpTableOff % 64 == 0 &&
              L.heapOff % 64 == 0 && L.mrTableOff + sizeof(MrEntry) * uint64_t{L.mrSlots} <= L.qpTableOff &&
              L.qpTableOff + sizeof(QpShared) * uint64_t{L.qpSlots} <= L.heapOff && L.heapOff < kSegmentBytes;
  if (!sane || h->magic != kMagic || h->version != kLayoutVersion || h->pid != static_cast<uint32_t>(pid)) {
    munmap(base_, kSegmentBytes);
    close(eventfd_);
    close(pidfd_);
    throw SysError{"connect", EPROTO};
  }
  // A peer that sees other pids or start times than ours (another pid or time namespace)
  // would misjudge our lock holders, and we its: no segment is shared with it.
  if (h->procView != proc_view()) {
    munmap(base_, kSegmentBytes);
    close(eventfd_);
    close(pidfd_);
    throw SysError{"connect", EXDEV};
  }
}

uint8_t* PeerSegment::mapRegion(uint32_t slot, uint64_t regionId, int remoteFd, uint64_t length) {
  auto it = regions_.find(slot);
  if (it != regions_.end()) {
    if (it->second.regionId == regionId) return it->second.length >= length ? it->second.base : nullptr;
    // The slot was registered again since: drop the old mapping (it pins old pages).
    if (it->second.base) munmap(it->second.base, it->second.length);
    regions_.erase(it);
  }
  uint8_t* base = nullptr;
  int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd_, remoteFd, 0));
  if (fd >= 0) {
    // Only a memfd that cannot shrink under the mapping (or a later copy faults the process).
    void* p = length && sealed_at_least(fd, length) ? mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                                    : MAP_FAILED;
    close(fd);
    if (p != MAP_FAILED) base = static_cast<uint8_t*>(p);
  }
  // Remember failures too (nullptr): the caller falls back to cross-memory attach.
  regions_[slot] = Region{base, base ? length : 0, regionId};
  return base;
}

PeerSegment::~PeerSegment() {
  for (auto& [key, r] : regions_) {
    if (r.base) munmap(r.base, r.length);
  }
  munmap(base_, kSegmentBytes);
  close(eventfd_);
  close(pidfd_);
}

void PeerSegment::ring() const {
  if (ringInto_) {
    *ringInto_ = true;
    return;
  }
  uint64_t one = 1;
  ssize_t r = write(eventfd_, &one, sizeof one);
  (void)r;
}

}  // namespace soft

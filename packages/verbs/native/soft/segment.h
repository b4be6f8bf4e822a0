// A device's shared segment: created by its owner (memfd), or mapped from a peer
// (pidfd_getfd of the owner's memfd and eventfd).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "layout.h"

namespace soft {

struct SysError {
  const char* syscall;
  int err;
};

// Where a segment's tables are. A peer's is read from its header once, at map time, and
// validated against the mapped size: what the peer writes there later changes nothing.
struct Layout {
  uint64_t mrTableOff, qpTableOff, heapOff;
  uint32_t mrSlots, qpSlots;
};

// The owner's segment. Throws SysError.
class OwnSegment {
 public:
  OwnSegment();
  ~OwnSegment();
  OwnSegment(const OwnSegment&) = delete;
  OwnSegment& operator=(const OwnSegment&) = delete;

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  uint8_t* base() const { return base_; }
  const Layout& layout() const { return layout_; }
  int memfd() const { return memfd_; }
  int eventfd() const { return eventfd_; }
  // Heap for queues: first-fit over the segment past the fixed tables.
  uint64_t alloc(uint64_t bytes);
  void free(uint64_t off);
  // Marks the device dead for peers and releases the liveness lock.
  void retire();

 private:
  uint8_t* base_ = nullptr;
  int memfd_ = -1;
  int eventfd_ = -1;
  bool retired_ = false;
  Layout layout_{};
  struct Block {
    uint64_t off, bytes;
    bool used;
  };
  Block* blocks_ = nullptr;
  size_t nblocks_ = 0, capBlocks_ = 0;
};

// A peer's segment, mapped into this process (always owned by a shared_ptr: a doorbell
// owed to it keeps it, and its eventfd, alive until rung).
class PeerSegment : public std::enable_shared_from_this<PeerSegment> {
 public:
  PeerSegment(pid_t pid, int remoteMemfd, int remoteEventfd);  // throws SysError
  ~PeerSegment();
  PeerSegment(const PeerSegment&) = delete;
  PeerSegment& operator=(const PeerSegment&) = delete;

  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(base_); }
  uint8_t* base() const { return base_; }
  const Layout& layout() const { return layout_; }
  pid_t pid() const { return pid_; }
  void ring() const;  // doorbell: wakes the owner's event loop
  // Its doorbell is a flag of this process (ringInto): nothing to save by holding it back.
  bool ringsInto() const { return ringInto_ != nullptr; }
  // Rings become `*flag = true` instead (this process's own segment, rung by the TCP link's
  // responder: the addon delivers the wake-up itself, without an eventfd round trip).
  void ringInto(bool* flag) { ringInto_ = flag; }
  // This process's mapping of the peer's memfd-backed region in `slot` (at least `length`
  // bytes, of a memfd sealed against shrinking: touching it never raises SIGBUS), or nullptr.
  uint8_t* mapRegion(uint32_t slot, uint64_t regionId, int remoteFd, uint64_t length);
  bool alive() const { return owner_alive(header()); }
  // The same answer for a per-WR loop, usually one load (layout.h owner_alive_hot).
  bool aliveHot() const { return owner_alive_hot(header()); }

  int refs = 0;
  int remoteMemfd;
  // In the device's owed doorbells now (Device::ringPeer): owed once, however often rung.
  mutable bool ringOwed = false;

 private:
  pid_t pid_;
  int pidfd_ = -1;
  int eventfd_ = -1;
  bool* ringInto_ = nullptr;
  uint8_t* base_ = nullptr;
  Layout layout_{};
  struct Region {
    uint8_t* base;
    uint64_t length;
    uint64_t regionId;
  };
  std::unordered_map<uint32_t, Region> regions_;
};

std::string boot_id();
// Seals a memfd against shrinking and growing: a peer mapping it never faults.
void seal_size(int fd);

}  // namespace soft

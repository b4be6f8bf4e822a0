// What the files of the soft engine (device.cc and its concepts: mr, cq, recv, qp, send,
// link, faults) share and nothing else sees: checks of a peer's MR table and queues, the
// pins held for one operation, state transitions and the receive-queue ring.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "device.h"
#include "wire.h"

namespace soft {

// IB spec table of the encoded minimum RNR NAK timer, in milliseconds (0 is the longest).
inline constexpr double kRnrTimerMs[32] = {
    655.36, 0.01, 0.02, 0.03, 0.04,  0.06,  0.08,  0.12,  0.16,  0.24,  0.32,  0.48,   0.64,   0.96,   1.28,   1.92,
    2.56,   3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};

// Local ACK timeout: 4.096 us * 2^timeout. 0 means infinite: retransmit every 100 ms.
inline double ack_timeout_ms(uint32_t timeout) {
  if (timeout == 0) return 100.0;
  return 4.096e-3 * std::ldexp(1.0, static_cast<int>(timeout));
}

inline uint8_t wc_opcode(uint8_t op) {
  switch (op) {
    case OP_RDMA_WRITE:
    case OP_RDMA_WRITE_WITH_IMM: return WCO_RDMA_WRITE;
    case OP_RDMA_READ: return WCO_RDMA_READ;
    case OP_ATOMIC_CMP_AND_SWP: return WCO_COMP_SWAP;
    case OP_ATOMIC_FETCH_AND_ADD: return WCO_FETCH_ADD;
    default: return WCO_SEND;
  }
}

inline constexpr size_t kMaxIov = DeviceLimits::maxSge;
// A WRITE or READ larger than this moves in pieces of this size, as many per turn of the
// event loop as fit in kCopyTurnMs: a 1 GiB copy then holds the JS thread about that long
// per turn whatever each piece costs. Small pieces because a piece is not always a memcpy
// at memory speed: into (or from) pages never touched, each 4 KiB is a page fault that
// allocates and zeroes a page. Measured on a loaded 2-core host, fresh memfd pages: 2 MiB
// steps held the thread 30 ms per turn (1.6 s at worst); 64 KiB pieces 1.1 ms of CPU per
// turn on average (0.9 ms into pages already there).
inline constexpr uint64_t kCopyStep = 64ull << 10;
// The share of one turn of the loop a large copy takes (ms): at least one piece per turn.
inline constexpr double kCopyTurnMs = 1.0;
// WRs of one QP on the TCP link at once (the head and those behind it).
inline constexpr uint32_t kLinkWindow = 16;

inline MrEntry* mr_table(uint8_t* base, const Layout& L) { return reinterpret_cast<MrEntry*>(base + L.mrTableOff); }

// Keys are random 32-bit numbers (a guess hits with odds live/2^32): an entry lives in one
// of kMrProbes slots from its key's home slot, where owner and peers alike look for it.
inline constexpr uint32_t kMrProbes = 16;
// Multiplicative hash, then scaled into [0, slots) by a multiply and shift (no division: a
// READ looks up two keys, and a 64-bit divide per lookup was most of its key checks).
inline uint32_t mr_home(uint32_t key, uint32_t slots) {
  return static_cast<uint32_t>((static_cast<uint64_t>(key * 2654435761u) * slots) >> 32);
}

// The slot holding `key` in a segment's MR table, or UINT32_MAX (one atomic load per probe).
inline uint32_t find_mr(uint8_t* base, const Layout& L, uint32_t key) {
  if (key == 0 || L.mrSlots == 0) return UINT32_MAX;
  MrEntry* t = mr_table(base, L);
  uint32_t home = mr_home(key, L.mrSlots);
  for (uint32_t i = 0, s = home; i < kMrProbes; i++, s = s + 1 == L.mrSlots ? 0 : s + 1) {
    if (t[s].key.load(std::memory_order_acquire) == key) return s;
  }
  return UINT32_MAX;
}

// Looks a key up in a segment's MR table; checks bounds and access against one read of
// the entry. 0 = ok, else a reason: 1 bad key, 2 out of bounds, 3 access denied.
// check_mr on the entry at `slot` (found by find_mr for `key`).
inline int check_mr_at(uint8_t* base, const Layout& L, uint32_t slot, uint32_t key, uint64_t addr, uint64_t len,
                       uint32_t need, MrView* out) {
  MrEntry& m = mr_table(base, L)[slot];
  if (m.key.load(std::memory_order_acquire) != key) return 1;
  MrView v{__atomic_load_n(&m.addr, __ATOMIC_RELAXED),     __atomic_load_n(&m.length, __ATOMIC_RELAXED),
           __atomic_load_n(&m.access, __ATOMIC_RELAXED),   __atomic_load_n(&m.memfd, __ATOMIC_RELAXED),
           __atomic_load_n(&m.regionId, __ATOMIC_RELAXED), slot};
  if (m.key.load(std::memory_order_acquire) != key) return 1;  // re-registered while read
  if (addr + len < addr || v.addr + v.length < v.addr || addr < v.addr || addr + len > v.addr + v.length) return 2;
  if ((v.access & need) != need) return 3;
  if (out) *out = v;
  return 0;
}

inline int check_mr(uint8_t* base, const Layout& L, uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
                    MrView* out = nullptr) {
  uint32_t slot = find_mr(base, L, key);
  if (slot == UINT32_MAX) return 1;
  return check_mr_at(base, L, slot, key, addr, len, need, out);
}

// Pins a peer's regions for the length of one operation. A pin is taken before the key is
// checked (both seq_cst, against the owner's key store then pin load), so either the owner sees
// the pin and waits, or the initiator sees the revoked key and fails the access.
class MrPins {
 public:
  MrPins(uint8_t* base, const Layout& L) : base_(base), layout_(L) {}
  ~MrPins() {
    for (size_t i = 0; i < n_; i++) held_[i]->pins.fetch_sub(1, std::memory_order_release);
  }
  MrPins(const MrPins&) = delete;
  MrPins& operator=(const MrPins&) = delete;

  // check_mr, holding the region until this object goes away; `out` gets the entry as checked.
  int check(uint32_t key, uint64_t addr, uint64_t len, uint32_t need, MrView* out) {
    uint32_t slot = find_mr(base_, layout_, key);
    if (slot == UINT32_MAX || n_ == kCapacity) return 1;
    MrEntry& m = mr_table(base_, layout_)[slot];
    m.pins.fetch_add(1, std::memory_order_seq_cst);
    held_[n_++] = &m;
    if (m.key.load(std::memory_order_seq_cst) != key) return 1;
    return check_mr_at(base_, layout_, slot, key, addr, len, need, out);
  }

 private:
  static constexpr size_t kCapacity = kMaxIov + 1;
  uint8_t* base_;
  const Layout& layout_;
  MrEntry* held_[kCapacity];
  size_t n_ = 0;
};

// QP numbers are unique within a process (several devices, workers) and spread by pid.
inline std::atomic<uint32_t> g_nextQpn{0};
// Set once per process from the kernel's randomness: QPNs do not give away their order.
inline std::atomic<uint32_t> g_qpnMask{0};

// The QP number of the n-th QP of this process: an odd multiplier is a bijection of the
// 24-bit space, so QPNs stay unique while they look random; 0 and 1 (QP0/QP1) are skipped.
inline uint32_t next_qpn() {
  for (;;) {
    uint32_t n = g_nextQpn.fetch_add(1);
    uint32_t qpn = ((n * 0x9E3779B1u) ^ g_qpnMask.load(std::memory_order_relaxed)) & 0xffffff;
    if (qpn > 1) return qpn;
  }
}

// A key that fails because its owner is closing (QPs are reset before MRs are revoked) is
// a vanished responder, not an access error.
inline bool responderGone(QpShared* t) {
  uint32_t st = state_code(t->state.load(std::memory_order_seq_cst));
  return st != QPS_RTR && st != QPS_RTS;
}

// Holds a peer's QP for one operation (see QpShared::pins). Taken, then the slot's gen and
// state word are checked again: either the owner sees the pin and waits, or this side sees
// the new gen or incarnation and drops the operation.
class QpPin {
 public:
  explicit QpPin(QpShared* t) : t_(t) { t_->pins.fetch_add(1, std::memory_order_seq_cst); }
  ~QpPin() { t_->pins.fetch_sub(1, std::memory_order_release); }
  QpPin(const QpPin&) = delete;
  QpPin& operator=(const QpPin&) = delete;

 private:
  QpShared* t_;
};

// Owner-side transition: from a state in `from` (bit per state code) to `code`, as a new
// incarnation. False when the QP is not in one of those states (a peer may just have
// failed it: the owner then sees ERR, as after an async error).
inline bool transition(QpShared* s, uint32_t fromMask, uint32_t code) {
  uint32_t w = s->state.load(std::memory_order_acquire);
  for (;;) {
    if (!(fromMask & (1u << state_code(w)))) return false;
    if (s->state.compare_exchange_weak(w, next_state(w, code), std::memory_order_seq_cst)) return true;
  }
}
inline constexpr uint32_t kAnyState = 0xffffffffu;
constexpr uint32_t bit(uint32_t code) { return 1u << code; }

inline bool sane_queues(PeerSegment* p, QpShared* t) {
  const uint64_t lo = p->layout().heapOff, hi = kSegmentBytes;
  uint64_t rqOff = t->rqOff, cqOff = t->recvCqOff;
  if (rqOff < lo || rqOff + sizeof(RecvQueue) > hi || cqOff < lo || cqOff + sizeof(CqShared) > hi) return false;
  // Aligned as the owner allocates them: a peer's odd offset would put a lock word across
  // two cache lines (a split lock: slow, or SIGBUS where the kernel makes it fatal).
  if (rqOff % alignof(RecvQueue) != 0 || cqOff % alignof(CqShared) != 0) return false;
  auto* r = reinterpret_cast<RecvQueue*>(p->base() + rqOff);
  auto* cq = reinterpret_cast<CqShared*>(p->base() + cqOff);
  if (r->capacity == 0 || r->maxSge == 0 || r->maxSge > kMaxIov) return false;
  if (r->wqeOff < lo || r->wqeOff + static_cast<uint64_t>(r->wqeBytes) * r->capacity > hi) return false;
  if (cq->capacity == 0 || cq->entriesOff < lo ||
      cq->entriesOff + sizeof(Cqe) * static_cast<uint64_t>(cq->capacity) > hi)
    return false;
  return true;
}

// ---- receive queues (a QP's own or an SRQ), in a segment: owner posts, initiators take.

inline uint64_t rq_bytes(uint32_t cap, uint32_t maxSge, uint32_t* wqeBytes) {
  *wqeBytes = static_cast<uint32_t>(sizeof(RecvWqe) + sizeof(WireSge) * maxSge);
  return 64 + static_cast<uint64_t>(*wqeBytes) * cap;
}

inline void init_rq(uint8_t* base, uint64_t off, uint32_t cap, uint32_t maxSge) {
  auto* r = reinterpret_cast<RecvQueue*>(base + off);
  uint32_t wb;
  rq_bytes(cap, maxSge, &wb);
  r->capacity = cap;
  r->maxSge = maxSge;
  r->wqeBytes = wb;
  r->wqeOff = off + 64;
}

inline RecvWqe* wqe_at(uint8_t* base, RecvQueue* r, uint32_t i) {
  return reinterpret_cast<RecvWqe*>(base + r->wqeOff + static_cast<uint64_t>(r->wqeBytes) * (i % r->capacity));
}

// Appends receive WRs (JS encoding: wrId, numSge, then addr/length/lkey triples). A WR
// that overruns `words` or names more SGEs than the queue holds is refused, not read.
inline PostResult post_rq(uint8_t* base, RecvQueue* r, uint64_t self, const double* wrs, size_t words, int count) {
  if (count > 0 && !r->lock.lock(self)) return {0, POST_BUSY};  // a peer stopped while taking a WQE
  size_t p = 0;
  for (int i = 0; i < count; i++) {
    uint32_t n = p + RECV_WR_HEADER_WORDS <= words ? to_u32(wrs[p + RECV_WR_NUM_SGE]) : UINT32_MAX;
    if (n > r->maxSge || p + RECV_WR_HEADER_WORDS + SGE_WORDS * static_cast<size_t>(n) > words) {
      r->lock.unlock();
      return {static_cast<uint32_t>(i), POST_EINVAL};
    }
    if (r->count == r->capacity) {
      r->lock.unlock();
      return {static_cast<uint32_t>(i), POST_ENOMEM};
    }
    RecvWqe* w = wqe_at(base, r, r->head + r->count);
    w->wrId = to_u64(wrs[p + RECV_WR_ID]);
    w->numSge = n;
    p += RECV_WR_HEADER_WORDS;
    auto* sg = reinterpret_cast<WireSge*>(w + 1);
    for (uint32_t s = 0; s < n; s++, p += SGE_WORDS) {
      sg[s].addr = to_u64(wrs[p + SGE_ADDR]);
      sg[s].length = to_u32(wrs[p + SGE_LENGTH]);
      sg[s].lkey = to_u32(wrs[p + SGE_LKEY]);
    }
    __atomic_store_n(&r->count, r->count + 1, __ATOMIC_RELEASE);
  }
  r->lock.unlock();
  return {static_cast<uint32_t>(count), POST_OK};
}

// Takes the next receive WQE: TAKE_EMPTY when none is posted (receiver not ready),
// TAKE_BUSY when its lock was not obtained in time (nothing taken: retry).
enum Take { TAKEN, TAKE_EMPTY, TAKE_BUSY };
// With `state`, only while it still holds `word` (checked under the queue's lock, which the
// owner's reset takes too): a WQE posted for the next connection is never taken by an
// operation of the previous one.
inline Take take_rq(uint8_t* base, RecvQueue* r, uint64_t self, RecvWqe* out, WireSge* sgOut, bool* limitHit,
                    const std::atomic<uint32_t>* state = nullptr, uint32_t word = 0) {
  if (!r->lock.lock(self)) return TAKE_BUSY;
  if (state && state->load(std::memory_order_seq_cst) != word) {
    r->lock.unlock();
    return TAKE_BUSY;  // the QP moved on: this operation is dropped like a lost packet
  }
  if (r->count == 0) {
    r->lock.unlock();
    return TAKE_EMPTY;
  }
  RecvWqe* w = wqe_at(base, r, r->head);
  *out = *w;
  uint32_t n = std::min<uint32_t>(std::min<uint32_t>(w->numSge, r->maxSge), static_cast<uint32_t>(kMaxIov));
  std::memcpy(sgOut, w + 1, sizeof(WireSge) * n);
  out->numSge = n;
  r->head = (r->head + 1) % r->capacity;
  r->count--;
  uint32_t lim = r->limit.load(std::memory_order_relaxed);
  *limitHit = lim && r->count < lim;
  if (*limitHit) {
    r->limit.store(0);
    r->limitReached.store(1, std::memory_order_release);
    flag_attention(base);
  }
  r->lock.unlock();
  return TAKEN;
}

}  // namespace soft

#include "device.h"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>

#include "copy.h"
#include "wire.h"

namespace soft {

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

namespace {

// IB spec table of the encoded minimum RNR NAK timer, in milliseconds (0 is the longest).
constexpr double kRnrTimerMs[32] = {655.36, 0.01,  0.02,  0.03,  0.04,  0.06,  0.08,  0.12,
                                    0.16,   0.24,  0.32,  0.48,  0.64,  0.96,  1.28,  1.92,
                                    2.56,   3.84,  5.12,  7.68,  10.24, 15.36, 20.48, 30.72,
                                    40.96,  61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52};

// Local ACK timeout: 4.096 us * 2^timeout. 0 means infinite: retransmit every 100 ms.
double ack_timeout_ms(uint32_t timeout) {
  if (timeout == 0) return 100.0;
  return 4.096e-3 * std::ldexp(1.0, static_cast<int>(timeout));
}

uint8_t wc_opcode(uint8_t op) {
  switch (op) {
    case OP_RDMA_WRITE:
    case OP_RDMA_WRITE_WITH_IMM: return WCO_RDMA_WRITE;
    case OP_RDMA_READ: return WCO_RDMA_READ;
    default: return WCO_SEND;
  }
}

constexpr size_t kMaxIov = DeviceLimits::maxSge;

inline MrEntry* mr_table(uint8_t* base, const Layout& L) { return reinterpret_cast<MrEntry*>(base + L.mrTableOff); }

// Looks a key up in a segment's MR table; checks bounds and access against one read of
// the entry. 0 = ok, else a reason: 1 bad key, 2 out of bounds, 3 access denied.
int check_mr(uint8_t* base, const Layout& L, uint32_t key, uint64_t addr, uint64_t len, uint32_t need,
             MrView* out = nullptr) {
  uint32_t slot = key >> 8;
  if (key == 0 || slot >= L.mrSlots) return 1;
  MrEntry& m = mr_table(base, L)[slot];
  if (m.key.load(std::memory_order_acquire) != key) return 1;
  MrView v{__atomic_load_n(&m.addr, __ATOMIC_RELAXED), __atomic_load_n(&m.length, __ATOMIC_RELAXED),
           __atomic_load_n(&m.access, __ATOMIC_RELAXED), __atomic_load_n(&m.memfd, __ATOMIC_RELAXED),
           __atomic_load_n(&m.regionId, __ATOMIC_RELAXED), slot};
  if (m.key.load(std::memory_order_acquire) != key) return 1;  // re-registered while read
  if (addr + len < addr || v.addr + v.length < v.addr || addr < v.addr || addr + len > v.addr + v.length) return 2;
  if ((v.access & need) != need) return 3;
  if (out) *out = v;
  return 0;
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
    uint32_t slot = key >> 8;
    if (key == 0 || slot >= layout_.mrSlots || n_ == kCapacity) return 1;
    MrEntry& m = mr_table(base_, layout_)[slot];
    m.pins.fetch_add(1, std::memory_order_seq_cst);
    held_[n_++] = &m;
    if (m.key.load(std::memory_order_seq_cst) != key) return 1;
    return check_mr(base_, layout_, key, addr, len, need, out);
  }

 private:
  static constexpr size_t kCapacity = kMaxIov + 1;
  uint8_t* base_;
  const Layout& layout_;
  MrEntry* held_[kCapacity];
  size_t n_ = 0;
};

}  // namespace

namespace {
// QP numbers are unique within a process (several devices, workers) and spread by pid.
std::atomic<uint32_t> g_nextQpn{0};
}  // namespace

// A key that fails because its owner is closing (QPs are reset before MRs are revoked) is
// a vanished responder, not an access error.
static bool responderGone(QpShared* t) {
  uint32_t st = state_code(t->state.load(std::memory_order_seq_cst));
  return st != QPS_RTR && st != QPS_RTS;
}

namespace {
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
}  // namespace

// Owner-side transition: from a state in `from` (bit per state code) to `code`, as a new
// incarnation. False when the QP is not in one of those states (a peer may just have
// failed it: the owner then sees ERR, as after an async error).
static bool transition(QpShared* s, uint32_t fromMask, uint32_t code) {
  uint32_t w = s->state.load(std::memory_order_acquire);
  for (;;) {
    if (!(fromMask & (1u << state_code(w)))) return false;
    if (s->state.compare_exchange_weak(w, next_state(w, code), std::memory_order_seq_cst)) return true;
  }
}
constexpr uint32_t kAnyState = 0xffffffffu;
constexpr uint32_t bit(uint32_t code) { return 1u << code; }

static bool sane_queues(PeerSegment* p, QpShared* t) {
  const uint64_t lo = p->layout().heapOff, hi = kSegmentBytes;
  uint64_t rqOff = t->rqOff, cqOff = t->recvCqOff;
  if (rqOff < lo || rqOff + sizeof(RecvQueue) > hi || cqOff < lo || cqOff + sizeof(CqShared) > hi) return false;
  auto* r = reinterpret_cast<RecvQueue*>(p->base() + rqOff);
  auto* cq = reinterpret_cast<CqShared*>(p->base() + cqOff);
  if (r->capacity == 0 || r->maxSge == 0 || r->maxSge > kMaxIov) return false;
  if (r->wqeOff < lo || r->wqeOff + static_cast<uint64_t>(r->wqeBytes) * r->capacity > hi) return false;
  if (cq->capacity == 0 || cq->entriesOff < lo || cq->entriesOff + sizeof(Cqe) * static_cast<uint64_t>(cq->capacity) > hi) return false;
  return true;
}

// Under Yama ptrace_scope 1 (Ubuntu's default) only an ancestor may pidfd_getfd this
// process's fds, and peers are usually siblings: declare any same-user process a permitted
// tracer, once per process. That is exactly the same-host trust model (a same-user process
// that may ptrace this one can map its segment) and nothing beyond it; with scope 0 nothing
// changes, and with 2 or 3 it does not help (connect then fails with ERR_RDMA_UNREACHABLE).
static void allow_same_user_peers() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
    int scope = -1;
    if (f >> scope && scope == 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  });
}

Device::Device() : pid_(getpid()) {
  allow_same_user_peers();
  uint32_t expected = 0;
  g_nextQpn.compare_exchange_strong(expected, 0x100 + (static_cast<uint32_t>(pid_) * 4096u) % 0xf00000u);
  freeMrSlots_.reserve(kMrSlots);
  for (uint32_t s = kMrSlots; s-- > 1;) freeMrSlots_.push_back(s);
  freeQpSlots_.reserve(kQpSlots);
  for (uint32_t s = kQpSlots; s-- > 0;) freeQpSlots_.push_back(s);
  qpBySlot_.assign(kQpSlots, nullptr);
  mrGen_.assign(kMrSlots, 0);
}

void Device::quiesceQps() {
  for (auto& [h, q] : qps_) {
    QpShared* sh = qpShared(q->slot);
    transition(sh, kAnyState, QPS_RESET);
    sh->gen.store(q->gen + 1, std::memory_order_seq_cst);
  }
}

Device::~Device() {
  // As the kernel tears down a dying process: QPs first (peers now see no responder and end
  // in RETRY_EXC_ERR), then the registrations, waiting for copies already under way.
  quiesceQps();
  revokeMrs();
  qps_.clear();
  seg_.retire();
}

void Device::ringSelf() {
  uint64_t one = 1;
  ssize_t r = write(seg_.eventfd(), &one, sizeof one);
  (void)r;
}

QpShared* Device::qpShared(uint32_t slot) {
  return reinterpret_cast<QpShared*>(seg_.base() + seg_.layout().qpTableOff) + slot;
}

MrEntry* Device::mrEntry(uint32_t slot) { return mr_table(seg_.base(), seg_.layout()) + slot; }

// ---------------------------------------------------------------- memory regions

int Device::regMr(uint64_t addr, uint64_t length, uint32_t access, int memfd, uint32_t* keyOut) {
  if (freeMrSlots_.empty()) return -1;
  uint32_t slot = freeMrSlots_.back();
  freeMrSlots_.pop_back();
  uint8_t g = static_cast<uint8_t>(mrGen_[slot] % 255 + 1);
  mrGen_[slot] = g;
  uint32_t key = (slot << 8) | g;
  MrEntry* e = mrEntry(slot);
  e->access = access;
  e->addr = addr;
  e->length = length;
  e->memfd = memfd;
  e->regionId = ++regionCounter_;
  e->key.store(key, std::memory_order_release);
  int h = nextHandle_++;
  mrs_[h] = Mr{slot, key, addr, length, access};
  *keyOut = key;
  return h;
}

bool Device::deregMr(int h, uint32_t* slotOut) {
  auto it = mrs_.find(h);
  if (it == mrs_.end()) return true;
  uint32_t slot = it->second.slot;
  mrs_.erase(it);
  if (slotOut) *slotOut = slot;
  if (revokeSlot(slot)) {
    freeMrSlots_.push_back(slot);
    return true;
  }
  pinnedMrSlots_.push_back(slot);
  return false;
}

void Device::revokeMrs(std::vector<int>* stuck) {
  for (auto& [h, m] : mrs_) mrEntry(m.slot)->key.store(0, std::memory_order_seq_cst);
  for (auto& [h, m] : mrs_) {
    if (revokeSlot(m.slot)) {
      freeMrSlots_.push_back(m.slot);
    } else {
      pinnedMrSlots_.push_back(m.slot);
      if (stuck) stuck->push_back(h);
    }
  }
  mrs_.clear();
}

void Device::drainMrSlots(std::vector<uint32_t>* freed) {
  for (size_t i = 0; i < pinnedMrSlots_.size();) {
    uint32_t slot = pinnedMrSlots_[i];
    if (mrEntry(slot)->pins.load(std::memory_order_seq_cst) == 0) {
      freeMrSlots_.push_back(slot);
      freed->push_back(slot);
      pinnedMrSlots_[i] = pinnedMrSlots_.back();
      pinnedMrSlots_.pop_back();
    } else {
      i++;
    }
  }
}

Device::Quarantine Device::quarantine() const {
  Quarantine q{};
  q.mrSlots = static_cast<uint32_t>(pinnedMrSlots_.size());
  q.queueBlocks = static_cast<uint32_t>(quarantined_.size());
  q.qpSlots = static_cast<uint32_t>(drainingSlots_.size());
  return q;
}

bool Device::revokeSlot(uint32_t slot) {
  MrEntry* e = mrEntry(slot);
  e->key.store(0, std::memory_order_seq_cst);
  // A copy takes microseconds (a large one milliseconds); only a peer that died or was
  // stopped mid-copy holds a pin for long. The JS thread does not wait for it: past the
  // bound the slot and its memory are quarantined (drainMrSlots gives them back once the
  // pins drain), so neither a late copy nor a late pin release reaches a new MR.
  const int64_t deadline = mono_ns() + kLockWaitNs;
  for (uint32_t spins = 0; e->pins.load(std::memory_order_seq_cst) != 0; spins++) {
    if (spins > 64) {
      if (mono_ns() > deadline) return false;
      sched_yield();
    }
  }
  return true;
}

// ---------------------------------------------------------------- completion queues

int Device::createCq(uint32_t capacity) {
  uint64_t off = seg_.alloc(sizeof(CqShared) + 64 + sizeof(Cqe) * static_cast<uint64_t>(capacity));
  if (!off) return -1;
  auto* cq = reinterpret_cast<CqShared*>(seg_.base() + off);
  cq->capacity = capacity;
  cq->entriesOff = off + ((sizeof(CqShared) + 63) & ~uint64_t{63});
  int h = nextHandle_++;
  cqs_[h] = CqRec{off};
  return h;
}

// Only for handles checked with hasCq (the adapter does), or held by a live QP.
CqShared* Device::cqAt(int h) {
  auto it = cqs_.find(h);
  return reinterpret_cast<CqShared*>(seg_.base() + (it == cqs_.end() ? 0 : it->second.off));
}

int Device::destroyCq(int h) {
  auto it = cqs_.find(h);
  if (it == cqs_.end()) return 0;
  if (it->second.users) return EBUSY;
  if (it->second.tainted) quarantined_.push_back(Quarantined{it->second.off, 0});
  else seg_.free(it->second.off);
  cqs_.erase(it);
  return 0;
}

uint32_t Device::cqCapacity(int h) { return cqAt(h)->capacity; }

uint32_t Device::cqCount(int h) {
  if (blockedCount_ && now_ms() >= nextDeadline_) progressDue();
  CqShared* cq = cqAt(h);
  return __atomic_load_n(&cq->count, __ATOMIC_ACQUIRE);
}

uint32_t Device::armCq(int h) {
  CqShared* cq = cqAt(h);
  cq->armed.store(1, std::memory_order_seq_cst);
  return __atomic_load_n(&cq->count, __ATOMIC_SEQ_CST);
}

Device::Push Device::pushCqe(uint8_t* base, CqShared* cq, const Cqe& e, const PeerSegment* peer, int64_t budgetNs) {
  if (!cq->lock.lock(static_cast<uint32_t>(pid_), budgetNs)) return PUSH_BUSY;
  if (cq->count == cq->capacity) {
    cq->lock.unlock();
    cq->overrun.store(1, std::memory_order_release);
    if (peer) peer->ring(); else ringSelf();
    return PUSH_FULL;
  }
  Cqe* entries = reinterpret_cast<Cqe*>(base + cq->entriesOff);
  entries[(cq->head + cq->count) % cq->capacity] = e;
  __atomic_store_n(&cq->count, cq->count + 1, __ATOMIC_RELEASE);
  cq->lock.unlock();
  // Dekker with armCq (store armed, load count): without a full fence the store of
  // count and the load of armed may reorder and both sides miss the wake-up.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (cq->armed.load(std::memory_order_seq_cst) && cq->armed.exchange(0)) {
    if (peer) peer->ring(); else ringSelf();
  }
  return PUSHED;
}

int Device::pollCq(int h, double* out, int max) {
  if (blockedCount_ && now_ms() >= nextDeadline_) progressDue();
  CqShared* cq = cqAt(h);
  if (__atomic_load_n(&cq->count, __ATOMIC_ACQUIRE) == 0) return 0;
  Cqe* entries = reinterpret_cast<Cqe*>(seg_.base() + cq->entriesOff);
  // A peer stopped inside its push holds the lock: nothing can be taken now, try later.
  if (!cq->lock.lock(static_cast<uint32_t>(pid_))) return 0;
  int n = static_cast<int>(std::min<uint32_t>(cq->count, static_cast<uint32_t>(max)));
  for (int i = 0; i < n; i++) {
    const Cqe& e = entries[(cq->head + i) % cq->capacity];
    double* o = out + i * 8;
    o[0] = static_cast<double>(e.wrId);
    o[1] = e.status;
    o[2] = e.opcode;
    o[3] = e.byteLen;
    o[4] = e.imm;
    o[5] = e.qpNum;
    o[6] = e.flags;
    o[7] = e.srcQp;
    if (e.sqSeq) {
      Qp* q = e.qpSlot < qpBySlot_.size() ? qpBySlot_[e.qpSlot] : nullptr;
      if (q && q->gen == e.qpGen && static_cast<int32_t>(e.sqSeq - q->sqRetired) > 0) q->sqRetired = e.sqSeq;
    }
  }
  cq->head = (cq->head + n) % cq->capacity;
  cq->count -= n;
  cq->lock.unlock();
  return n;
}

// ---------------------------------------------------------------- receive queues

namespace {

uint64_t rq_bytes(uint32_t cap, uint32_t maxSge, uint32_t* wqeBytes) {
  *wqeBytes = static_cast<uint32_t>(sizeof(RecvWqe) + sizeof(WireSge) * maxSge);
  return 64 + static_cast<uint64_t>(*wqeBytes) * cap;
}

void init_rq(uint8_t* base, uint64_t off, uint32_t cap, uint32_t maxSge) {
  auto* r = reinterpret_cast<RecvQueue*>(base + off);
  uint32_t wb;
  rq_bytes(cap, maxSge, &wb);
  r->capacity = cap;
  r->maxSge = maxSge;
  r->wqeBytes = wb;
  r->wqeOff = off + 64;
}

RecvWqe* wqe_at(uint8_t* base, RecvQueue* r, uint32_t i) {
  return reinterpret_cast<RecvWqe*>(base + r->wqeOff + static_cast<uint64_t>(r->wqeBytes) * (i % r->capacity));
}

// Appends receive WRs (JS encoding: wrId, numSge, then addr/length/lkey triples). A WR
// that overruns `words` or names more SGEs than the queue holds is refused, not read.
int post_rq(uint8_t* base, RecvQueue* r, uint32_t self, const double* wrs, size_t words, int count) {
  if (count > 0 && !r->lock.lock(self)) return POST_BUSY;  // a peer stopped while taking a WQE
  size_t p = 0;
  for (int i = 0; i < count; i++) {
    uint32_t n = p + 2 <= words ? to_u32(wrs[p + 1]) : UINT32_MAX;
    if (n > r->maxSge || p + 2 + 3 * static_cast<size_t>(n) > words) {
      r->lock.unlock();
      return (i << 8) | POST_EINVAL;
    }
    if (r->count == r->capacity) {
      r->lock.unlock();
      return (i << 8) | POST_ENOMEM;
    }
    RecvWqe* w = wqe_at(base, r, r->head + r->count);
    w->wrId = to_u64(wrs[p]);
    w->numSge = n;
    p += 2;
    auto* sg = reinterpret_cast<WireSge*>(w + 1);
    for (uint32_t s = 0; s < n; s++, p += 3) {
      sg[s].addr = to_u64(wrs[p]);
      sg[s].length = to_u32(wrs[p + 1]);
      sg[s].lkey = to_u32(wrs[p + 2]);
    }
    __atomic_store_n(&r->count, r->count + 1, __ATOMIC_RELEASE);
  }
  r->lock.unlock();
  return POST_OK;
}

// Takes the next receive WQE: TAKE_EMPTY when none is posted (receiver not ready),
// TAKE_BUSY when its lock was not obtained in time (nothing taken: retry).
enum Take { TAKEN, TAKE_EMPTY, TAKE_BUSY };
// With `state`, only while it still holds `word` (checked under the queue's lock, which the
// owner's reset takes too): a WQE posted for the next connection is never taken by an
// operation of the previous one.
Take take_rq(uint8_t* base, RecvQueue* r, uint32_t self, RecvWqe* out, WireSge* sgOut, bool* limitHit,
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
  }
  r->lock.unlock();
  return TAKEN;
}

}  // namespace

void Device::flushRecvQueue(uint8_t* base, RecvQueue* r, uint64_t cqOff, uint32_t qpNum, const PeerSegment* peer) {
  auto* cq = reinterpret_cast<CqShared*>(base + cqOff);
  for (;;) {
    RecvWqe w;
    WireSge sg[kMaxIov];
    bool lim;
    if (take_rq(base, r, static_cast<uint32_t>(pid_), &w, sg, &lim) != TAKEN) break;
    Cqe e{};
    e.wrId = w.wrId;
    e.status = WC_WR_FLUSH_ERR;
    e.qpNum = qpNum;
    if (pushCqe(base, cq, e, peer) == PUSH_BUSY) break;  // a stopped peer holds the CQ: bounded, not all flushed
  }
}

int Device::createSrq(uint32_t maxWr, uint32_t maxSge) {
  uint32_t wb;
  uint64_t off = seg_.alloc(rq_bytes(maxWr, maxSge, &wb));
  if (!off) return -1;
  init_rq(seg_.base(), off, maxWr, maxSge);
  int h = nextHandle_++;
  srqs_[h] = SrqRec{off};
  return h;
}

int Device::destroySrq(int h) {
  auto it = srqs_.find(h);
  if (it == srqs_.end()) return 0;
  if (it->second.users) return EBUSY;
  if (it->second.tainted) quarantined_.push_back(Quarantined{it->second.off, 0});
  else seg_.free(it->second.off);
  srqs_.erase(it);
  return 0;
}

int Device::postSrqRecv(int h, const double* wrs, size_t words, int count) {
  auto it = srqs_.find(h);
  if (it == srqs_.end()) return POST_EINVAL;
  return post_rq(seg_.base(), rq(it->second.off), static_cast<uint32_t>(pid_), wrs, words, count);
}

void Device::armSrqLimit(int h, uint32_t limit) {
  auto it = srqs_.find(h);
  if (it != srqs_.end()) rq(it->second.off)->limit.store(limit);
}

// ---------------------------------------------------------------- queue pairs

// Only for handles checked with hasQp (the adapter does).
Qp* Device::qp(int h) {
  auto it = qps_.find(h);
  return it == qps_.end() ? nullptr : it->second.get();
}

int Device::createQp(int sendCq, int recvCq, int srq, uint32_t maxSendWr, uint32_t maxRecvWr,
                     uint32_t maxSendSge, uint32_t maxRecvSge, uint32_t maxInline) {
  // Slots whose late pins have drained since are usable again.
  for (size_t i = 0; i < drainingSlots_.size();) {
    if (qpShared(drainingSlots_[i])->pins.load(std::memory_order_seq_cst) == 0) {
      freeQpSlots_.push_back(drainingSlots_[i]);
      drainingSlots_[i] = drainingSlots_.back();
      drainingSlots_.pop_back();
    } else {
      i++;
    }
  }
  if (freeQpSlots_.empty()) return -1;
  auto sc = cqs_.find(sendCq), rc = cqs_.find(recvCq);
  auto sr = srq >= 0 ? srqs_.find(srq) : srqs_.end();
  if (sc == cqs_.end() || rc == cqs_.end() || (srq >= 0 && sr == srqs_.end())) return -1;
  auto q = std::make_unique<Qp>();
  q->sendCqOff = sc->second.off;
  q->sendCq = sendCq;
  q->recvCq = recvCq;
  q->srq = srq;
  q->maxSendWr = maxSendWr;
  q->maxRecvWr = maxRecvWr;
  q->maxSendSge = maxSendSge;
  q->maxRecvSge = maxRecvSge;
  q->maxInline = maxInline;
  q->sq.resize(maxSendWr);
  q->sqSge.resize(static_cast<size_t>(maxSendWr) * maxSendSge);
  q->sqInline.resize(static_cast<size_t>(maxSendWr) * maxInline);
  if (srq < 0) {
    uint32_t wb;
    q->rqOff = seg_.alloc(rq_bytes(maxRecvWr, maxRecvSge, &wb));
    if (!q->rqOff) return -1;
    init_rq(seg_.base(), q->rqOff, maxRecvWr, maxRecvSge);
  }
  q->slot = freeQpSlots_.back();
  freeQpSlots_.pop_back();
  QpShared* s = qpShared(q->slot);
  q->gen = s->gen.load() + 1;
  s->qpn = g_nextQpn.fetch_add(1) & 0xffffff;
  s->state.store(next_state(s->state.load(), QPS_RESET));
  s->access.store(0);
  s->remoteError.store(0);
  s->stalled.store(0);
  s->linkBroken.store(0);
  s->hasSrq = srq >= 0;
  s->minRnrTimer = 12;
  s->rqOff = srq >= 0 ? sr->second.off : q->rqOff;
  s->recvCqOff = rc->second.off;
  sc->second.users++;
  rc->second.users++;
  if (srq >= 0) sr->second.users++;
  s->gen.store(q->gen, std::memory_order_release);
  qpBySlot_[q->slot] = q.get();
  int h = nextHandle_++;
  qps_[h] = std::move(q);
  return h;
}

bool Device::drainPins(QpShared* s) {
  const int64_t deadline = mono_ns() + kLockWaitNs;
  for (uint32_t spins = 0; s->pins.load(std::memory_order_seq_cst) != 0; spins++) {
    if (spins > 64) {
      if (mono_ns() > deadline) return false;
      sched_yield();
    }
  }
  return true;
}

void Device::destroyQp(int h) {
  auto it = qps_.find(h);
  if (it == qps_.end()) return;
  Qp& q = *it->second;
  toReset(h);
  QpShared* s = qpShared(q.slot);
  s->gen.store(q.gen + 1, std::memory_order_seq_cst);  // peers now see a vanished QP
  // Initiators that passed their checks before finish first; one that does not within the
  // bound (stopped mid-operation) may still write this QP's queues when it resumes: they
  // are quarantined, never freed or reused, and so is the slot until its pins drain.
  bool quiet = drainPins(s);
  if (q.rqOff) {
    if (quiet) seg_.free(q.rqOff);
    else quarantined_.push_back(Quarantined{q.rqOff, 0});
  }
  for (int c : {q.sendCq, q.recvCq}) {
    auto ci = cqs_.find(c);
    if (ci == cqs_.end()) continue;
    if (ci->second.users) ci->second.users--;
    if (!quiet) ci->second.tainted = true;
  }
  if (q.srq >= 0) {
    auto si = srqs_.find(q.srq);
    if (si != srqs_.end()) {
      if (si->second.users) si->second.users--;
      if (!quiet) si->second.tainted = true;
    }
  }
  qpBySlot_[q.slot] = nullptr;
  if (quiet) freeQpSlots_.push_back(q.slot);
  else drainingSlots_.push_back(q.slot);
  qps_.erase(it);
}

uint32_t Device::qpNum(int h) { return qpShared(qp(h)->slot)->qpn; }
uint32_t Device::qpSlot(int h) { return qp(h)->slot; }
uint32_t Device::qpGen(int h) { return qp(h)->gen; }
uint32_t Device::qpState(int h) { return state_code(qpShared(qp(h)->slot)->state.load(std::memory_order_acquire)); }

int Device::toInit(int h, uint32_t access) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  uint32_t st = state_code(s->state.load());
  if (st != QPS_RESET && st != QPS_INIT) return EINVAL;  // INIT → INIT re-applies attributes, as in verbs
  s->access.store(access);
  return transition(s, bit(QPS_RESET) | bit(QPS_INIT), QPS_INIT) ? 0 : EINVAL;
}

int Device::toRtr(int h, pid_t peerPid, int peerMemfd, int peerEventfd, uint64_t peerNonce, uint32_t peerSlot,
                  uint32_t peerGen, uint32_t peerQpn, uint32_t minRnrTimer, const SysError** sysErr) {
  static thread_local SysError err;
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  if (state_code(s->state.load()) != QPS_INIT) return EINVAL;
  if (peerSlot >= kQpSlots) return EINVAL;
  for (auto it = peers_.begin(); it != peers_.end();) it = it->second.expired() ? peers_.erase(it) : std::next(it);
  auto key = std::make_pair(peerPid, peerNonce);
  std::shared_ptr<PeerSegment> peer = peers_[key].lock();
  if (!peer) {
    try {
      peer = std::make_shared<PeerSegment>(peerPid, peerMemfd, peerEventfd);
    } catch (const SysError& e) {
      err = e;
      *sysErr = &err;
      return e.err;
    }
    if (peer->header()->nonce != peerNonce) {  // the fd now holds another device's segment
      err = SysError{"connect", ESTALE};
      *sysErr = &err;
      return ESTALE;
    }
    peers_[key] = peer;
  }
  q.peer = peer;
  q.peerSlot = peerSlot;
  q.peerGen = peerGen;
  q.peerQpn = peerQpn;
  s->minRnrTimer = minRnrTimer;
  s->peerPid = static_cast<uint32_t>(peerPid);
  s->peerQpn = peerQpn;
  return transition(s, bit(QPS_INIT), QPS_RTR) ? 0 : EINVAL;
}

int Device::toRts(int h, uint32_t timeout, uint32_t retryCount, uint32_t rnrRetry) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  if (state_code(s->state.load()) != QPS_RTR) return EINVAL;
  q.timeout = timeout;
  q.retryCount = retryCount;
  q.rnrRetry = rnrRetry;
  return transition(s, bit(QPS_RTR), QPS_RTS) ? 0 : EINVAL;
}

int Device::toErr(int h) {
  moveToError(*qp(h));  // from any state, as in verbs
  return 0;
}

int Device::toReset(int h) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  transition(s, kAnyState, QPS_RESET);
  unblock(q);
  // Operations of the old connection already under way end before the queue is reused:
  // none takes a WQE posted for the next one, nor completes into it.
  bool quiet = drainPins(s);
  // Sequences stay monotonic across resets: stale completions then retire nothing.
  q.sqHead = q.sqRetired = q.sqTail;
  RecvQueue* r = rq(s->rqOff);
  if (!s->hasSrq) {
    if (quiet && r->lock.lock(static_cast<uint32_t>(pid_))) {
      r->head = 0;
      r->count = 0;
      r->lock.unlock();
    } else {
      // A stopped peer holds it (its lock or a pin): the QP gets a fresh queue, and the
      // old one is never reused (the peer may write it when it resumes).
      uint32_t wb;
      uint64_t fresh = seg_.alloc(rq_bytes(q.maxRecvWr, q.maxRecvSge, &wb));
      if (fresh) {
        init_rq(seg_.base(), fresh, q.maxRecvWr, q.maxRecvSge);
        quarantined_.push_back(Quarantined{q.rqOff, 0});
        q.rqOff = fresh;
        s->rqOff = fresh;
      }
    }
  }
  s->stalled.store(0);
  s->linkBroken.store(0);
  s->remoteError.store(0);
  s->peerPid = 0;
  s->peerQpn = 0;
  q.delayMs = 0;
  q.link = q.linkReady = q.linkInflight = false;
  q.peer.reset();
  return 0;
}

void Device::moveToError(Qp& q) {
  transition(qpShared(q.slot), kAnyState, QPS_ERR);
  flushQp(q);
}

void Device::flushQp(Qp& q) {
  q.linkReady = q.linkInflight = false;  // a late answer from the link is then ignored
  unblock(q);
  auto* scq = reinterpret_cast<CqShared*>(seg_.base() + q.sendCqOff);
  QpShared* s = qpShared(q.slot);
  for (; q.sqHead != q.sqTail; q.sqHead++) {
    SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
    Cqe c{};
    c.wrId = e.wrId;
    c.status = WC_WR_FLUSH_ERR;
    c.qpNum = s->qpn;
    c.sqSeq = e.seq + 1;
    c.qpSlot = q.slot;
    c.qpGen = q.gen;
    if (pushCqe(seg_.base(), scq, c, nullptr) == PUSH_BUSY) break;  // bounded: the rest are not reported
  }
  if (!s->hasSrq) flushRecvQueue(seg_.base(), rq(s->rqOff), s->recvCqOff, s->qpn, nullptr);
}

int Device::postRecv(int h, const double* wrs, size_t words, int count) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  uint32_t st = state_code(s->state.load());
  if (st == QPS_RESET || s->hasSrq) return POST_EINVAL;
  int rc = post_rq(seg_.base(), rq(s->rqOff), static_cast<uint32_t>(pid_), wrs, words, count);
  // The specification flushes receives posted in ERR at once (rxe waits for the next
  // transition to ERR; documented difference).
  if (st == QPS_ERR) flushRecvQueue(seg_.base(), rq(s->rqOff), s->recvCqOff, s->qpn, nullptr);
  return rc;
}

int Device::postSend(int h, const double* wrs, size_t words, int count) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  uint32_t st = state_code(s->state.load());
  if (st == QPS_RESET || st == QPS_INIT || st == QPS_RTR) return POST_EINVAL;
  size_t p = 0;
  int rc = POST_OK;
  for (int i = 0; i < count; i++) {
    if (q.sqTail - q.sqRetired >= q.maxSendWr) {
      rc = (i << 8) | POST_ENOMEM;
      break;
    }
    // A WR that overruns `words`, names more SGEs than the queue holds or an opcode this
    // provider does not know is refused here: nothing is read past the array, and an
    // unknown opcode is never carried out as some other operation.
    uint32_t numSge = p + 7 <= words ? to_u32(wrs[p + 6]) : UINT32_MAX;
    double op = p + 7 <= words ? wrs[p + 1] : -1;
    if (numSge > q.maxSendSge || p + 7 + 3 * static_cast<size_t>(numSge) > words || !(op >= 0 && op <= static_cast<double>(OP_RDMA_READ)) ||
        op != static_cast<double>(static_cast<uint8_t>(op))) {
      rc = (i << 8) | POST_EINVAL;
      break;
    }
    uint32_t idx = q.sqTail % q.maxSendWr;
    SendEntry& e = q.sq[idx];
    e.wrId = to_u64(wrs[p]);
    e.opcode = static_cast<uint8_t>(op);
    uint32_t flags = to_u32(wrs[p + 2]);
    e.signaled = (flags & FLAG_SIGNALED) != 0;
    e.isInline = (flags & FLAG_INLINE) != 0 && e.opcode != OP_RDMA_READ;
    e.imm = to_u32(wrs[p + 3]);
    e.remoteAddr = to_u64(wrs[p + 4]);
    e.rkey = to_u32(wrs[p + 5]);
    e.numSge = numSge;
    p += 7;
    WireSge* sg = &q.sqSge[static_cast<size_t>(idx) * q.maxSendSge];
    // 64 bits: SGE lengths are up to 2^32 - 1 each, and their sum must not wrap (a
    // wrapped sum once let an inline copy land past the WR's inline slot).
    uint64_t total = 0;
    bool badInline = false;
    for (uint32_t k = 0; k < e.numSge; k++, p += 3) {
      sg[k].addr = to_u64(wrs[p]);
      sg[k].length = to_u32(wrs[p + 1]);
      sg[k].lkey = to_u32(wrs[p + 2]);
      if (e.isInline) {
        // Inline data is copied now: the application may reuse its buffer at once. The
        // range must be registered memory: an arbitrary address would crash the process
        // (as it does in libibverbs); the post is refused instead, as the ibverbs adapter does.
        if (sg[k].length && check_mr(seg_.base(), seg_.layout(), sg[k].lkey, sg[k].addr, sg[k].length, 0) != 0) {
          badInline = true;
        } else if (sg[k].length && total + sg[k].length <= q.maxInline) {
          std::memcpy(&q.sqInline[static_cast<size_t>(idx) * q.maxInline + total],
                      reinterpret_cast<const void*>(sg[k].addr), sg[k].length);
        }
      }
      total += sg[k].length;
    }
    if (badInline) {
      rc = (i << 8) | POST_BAD_INLINE;
      break;
    }
    if (e.isInline && total > q.maxInline) {
      rc = (i << 8) | POST_EINVAL;
      break;
    }
    e.inlineLen = static_cast<uint32_t>(total);
    e.seq = q.sqTail;
    e.done = 0;
    e.rnrLeft = q.rnrRetry == 7 ? -1 : static_cast<int32_t>(q.rnrRetry);
    e.retryLeft = (q.retryCount == 7 || q.timeout == 0) ? -1 : static_cast<int32_t>(std::max<uint32_t>(q.retryCount, 1));
    e.readyAt = 0;
    q.sqTail++;
  }
  if (st == QPS_ERR) {
    flushQp(q);  // posting in ERR succeeds and flushes at once, as on real devices
  } else if (q.blockedUntil == 0) {
    progress(q);
  }
  return rc;
}

void Device::unblock(Qp& q) {
  if (q.blockedUntil == 0) return;
  q.blockedUntil = 0;
  blockedCount_--;
}

void Device::block(Qp& q, double untilMs) {
  if (q.blockedUntil == 0) blockedCount_++;
  q.blockedUntil = untilMs;
  if (untilMs < nextDeadline_ || blockedCount_ == 1) nextDeadline_ = untilMs;
}

double Device::progressDue() {
  if (!blockedCount_) return 0;
  double now = now_ms();
  if (now < nextDeadline_) return nextDeadline_;  // nothing due: skip the scan
  double next = 0;
  for (auto& [h, qp] : qps_) {
    Qp& q = *qp;
    if (q.blockedUntil > 0 && q.blockedUntil <= now) {
      unblock(q);
      bool go = true;
      if (q.linkInflight) {
        // The frame's answer did not come in time: a lost packet, retried like one.
        q.linkInflight = false;
        SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
        go = settle(q, e, TRANSPORT, WC_SUCCESS, 0, q.linkRnrTimer);
      }
      if (go) progress(q);
    }
    if (q.blockedUntil > 0 && (next == 0 || q.blockedUntil < next)) next = q.blockedUntil;
  }
  nextDeadline_ = next;
  return next;
}

void Device::progress(Qp& q) {
  QpShared* s = qpShared(q.slot);
  while (q.sqHead != q.sqTail) {
    if (state_code(s->state.load(std::memory_order_acquire)) == QPS_ERR) {
      flushQp(q);
      return;
    }
    if (q.linkReady || q.linkInflight) return;  // the head WR is on the wire
    SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
    uint8_t status = WC_SUCCESS;
    uint32_t len = 0;
    Outcome o = execute(q, e, &status, &len);
    if (o == LINK) {
      q.linkReady = true;
      ringSelf();  // JS takes it from the doorbell (also right after a post)
      return;
    }
    uint32_t rnr = q.linkRnrTimer;
    if (o == RNR && q.peer) {
      rnr = (reinterpret_cast<QpShared*>(q.peer->base() + q.peer->layout().qpTableOff) + q.peerSlot)->minRnrTimer;
    }
    if (!settle(q, e, o, status, len, rnr)) return;
  }
}

bool Device::settle(Qp& q, SendEntry& e, Outcome o, uint8_t status, uint32_t len, uint32_t rnrTimer) {
  if (o == RNR) {
    if (e.rnrLeft == 0) {
      status = WC_RNR_RETRY_EXC_ERR;
    } else {
      if (e.rnrLeft > 0) e.rnrLeft--;
      block(q, now_ms() + kRnrTimerMs[rnrTimer & 31]);
      return false;
    }
  } else if (o == TRANSPORT) {
    if (e.retryLeft == 0) {
      status = WC_RETRY_EXC_ERR;
    } else {
      if (e.retryLeft > 0) e.retryLeft--;
      block(q, now_ms() + ack_timeout_ms(q.timeout));
      return false;
    }
  } else if (o == DELAY) {
    block(q, e.readyAt);
    return false;
  }
  q.sqHead++;
  completeSend(q, e, status, len);
  if (status != WC_SUCCESS) {
    moveToError(q);
    return false;
  }
  return true;
}

void Device::completeSend(Qp& q, SendEntry& e, uint8_t status, uint32_t byteLen) {
  if (status == WC_SUCCESS && !e.signaled) return;  // retired by a later signaled completion
  Cqe c{};
  c.wrId = e.wrId;
  c.status = status;
  QpShared* s = qpShared(q.slot);
  c.qpNum = s->qpn;
  c.sqSeq = e.seq + 1;
  c.qpSlot = q.slot;
  c.qpGen = q.gen;
  if (status == WC_SUCCESS) {
    c.opcode = wc_opcode(e.opcode);
    c.byteLen = byteLen;
    if (e.opcode == OP_SEND_WITH_IMM || e.opcode == OP_RDMA_WRITE_WITH_IMM) c.flags = WC_FLAG_WITH_IMM;
  }
  if (pushCqe(seg_.base(), reinterpret_cast<CqShared*>(seg_.base() + q.sendCqOff), c, nullptr) != PUSHED) {
    // A lost send completion would desynchronise the application: fail loudly instead.
    moveToError(q);
  }
}

void Device::remoteFail(PeerSegment* p, QpShared* t, uint32_t word) {
  // Only RTR/RTS → ERR, and only the incarnation this operation was checked against: if the
  // owner moved the QP since (reset, reconnect), the CAS fails and nothing happens.
  uint32_t code = state_code(word);
  if (code != QPS_RTR && code != QPS_RTS) return;
  uint32_t failed = (word & ~0xffu) | QPS_ERR;
  if (!t->state.compare_exchange_strong(word, failed, std::memory_order_seq_cst)) return;
  if (!t->hasSrq) flushRecvQueue(p->base(), reinterpret_cast<RecvQueue*>(p->base() + t->rqOff), t->recvCqOff, t->qpn, p);
  // The owner flushes on its doorbell only if the QP is still in this failed incarnation.
  t->remoteError.store(failed, std::memory_order_release);
  p->ring();
}

void* Device::direct(PeerSegment* p, const MrView& v, uint64_t addr) {
  if (p->pid() == pid_) return reinterpret_cast<void*>(addr);  // same address space
  if (v.memfd < 0) return nullptr;
  // [addr, +len) was checked inside [v.addr, +v.length), and the mapping holds v.length bytes.
  uint8_t* base = p->mapRegion(v.slot, v.regionId, v.memfd, v.length);
  return base ? base + (addr - v.addr) : nullptr;
}

bool Device::gatherLocal(Qp& q, SendEntry& e, iovec* local, size_t* nl, uint64_t* total, uint8_t* status) {
  *nl = 0;
  *total = 0;
  uint32_t idx = e.seq % q.maxSendWr;
  if (e.isInline) {
    local[0] = iovec{&q.sqInline[static_cast<size_t>(idx) * q.maxInline], e.inlineLen};
    *nl = e.inlineLen ? 1 : 0;
    *total = e.inlineLen;
  } else {
    const WireSge* sg = &q.sqSge[static_cast<size_t>(idx) * q.maxSendSge];
    uint32_t need = e.opcode == OP_RDMA_READ ? static_cast<uint32_t>(ACC_LOCAL_WRITE) : 0u;
    for (uint32_t k = 0; k < e.numSge; k++) {
      if (sg[k].length == 0) continue;
      int bad = check_mr(seg_.base(), seg_.layout(), sg[k].lkey, sg[k].addr, sg[k].length, need);
      if (bad) {
        *status = bad == 1 ? WC_LOC_QP_OP_ERR : WC_LOC_PROT_ERR;
        return false;
      }
      local[(*nl)++] = iovec{reinterpret_cast<void*>(sg[k].addr), sg[k].length};
      *total += sg[k].length;
    }
  }
  if (*total > DeviceLimits::maxMsg) {
    *status = WC_LOC_LEN_ERR;
    return false;
  }
  return true;
}

Device::Outcome Device::execute(Qp& q, SendEntry& e, uint8_t* status, uint32_t* byteLen) {
  QpShared* self = qpShared(q.slot);
  if (self->linkBroken.load(std::memory_order_relaxed)) return TRANSPORT;
  PeerSegment* p = q.peer.get();
  QpShared* t = nullptr;
  if (!q.link) {
    if (!p) return TRANSPORT;
    if (q.peerSlot >= p->layout().qpSlots) return TRANSPORT;
    t = reinterpret_cast<QpShared*>(p->base() + p->layout().qpTableOff) + q.peerSlot;
    if (t->linkBroken.load(std::memory_order_relaxed) || t->gen.load(std::memory_order_acquire) != q.peerGen ||
        !p->alive()) {
      return TRANSPORT;
    }
  }
  if (q.delayMs > 0) {
    if (e.readyAt == 0) e.readyAt = now_ms() + q.delayMs;
    if (now_ms() < e.readyAt) return DELAY;
  }

  // Local side: the gather list (or the inline copy), or the scatter list of a READ.
  iovec local[kMaxIov];
  size_t nl = 0;
  uint64_t total = 0;
  if (!gatherLocal(q, e, local, &nl, &total, status)) return DONE;
  *byteLen = static_cast<uint32_t>(total);
  if (q.link) return LINK;  // the TCP link carries it; linkDone() completes it
  pauseNextDeliverMs_ = q.pauseMs;
  q.pauseMs = 0;
  return deliver(p, t, q.peerGen, e.opcode, local, nl, total, e.imm, e.remoteAddr, e.rkey, self->qpn,
                 static_cast<uint32_t>(pid_), status);
}

Device::Outcome Device::deliver(PeerSegment* p, QpShared* t, uint32_t gen, uint8_t opcode, iovec* local, size_t nl,
                                uint64_t total, uint32_t imm, uint64_t remoteAddr, uint32_t rkey,
                                uint32_t srcQpn, uint32_t srcPid, uint8_t* status) {
  // Only the five operations there are: an unknown opcode (a forged frame, a corrupt WR) is
  // an invalid request, never treated as one of them without its checks.
  if (opcode > OP_RDMA_READ) {
    *status = WC_REM_INV_REQ_ERR;
    return DONE;
  }
  QpPin held(t);
  if (t->gen.load(std::memory_order_seq_cst) != gen) return TRANSPORT;  // destroyed under us
  const uint32_t word = t->state.load(std::memory_order_seq_cst);
  uint32_t tst = state_code(word);
  if (tst != QPS_RTR && tst != QPS_RTS) return TRANSPORT;
  // The target listens only to the QP it was connected to; anything else is dropped.
  if (t->peerQpn != srcQpn || t->peerPid != srcPid) return TRANSPORT;
  if (pauseNextDeliverMs_ > 0) {  // fault injection (tests): a slow initiator, mid-operation
    usleep(static_cast<useconds_t>(pauseNextDeliverMs_ * 1000));
    pauseNextDeliverMs_ = 0;
  }
  bool withImm = opcode == OP_SEND_WITH_IMM || opcode == OP_RDMA_WRITE_WITH_IMM;
  bool needRecv = opcode == OP_SEND || opcode == OP_SEND_WITH_IMM || opcode == OP_RDMA_WRITE_WITH_IMM;
  MrPins pins(p->base(), p->layout());
  MrView rview{};

  if (opcode == OP_RDMA_WRITE || opcode == OP_RDMA_WRITE_WITH_IMM || opcode == OP_RDMA_READ) {
    uint32_t need = opcode == OP_RDMA_READ ? ACC_REMOTE_READ : ACC_REMOTE_WRITE;
    if (total > 0) {  // a zero-length RDMA operation touches nothing and checks no key
      if ((t->access.load() & need) != need) {
        *status = WC_REM_INV_REQ_ERR;
        remoteFail(p, t, word);
        return DONE;
      }
      if (pins.check(rkey, remoteAddr, total, need, &rview)) {
        if (responderGone(t)) return TRANSPORT;
        *status = WC_REM_ACCESS_ERR;
        remoteFail(p, t, word);
        return DONE;
      }
    }
  }

  RecvWqe w{};
  WireSge rsg[kMaxIov];
  // Shared values of the peer are checked before use: a queue destroyed under us (or a
  // misbehaving peer) must end in a transport error, never in a wild access.
  if (!sane_queues(p, t)) return TRANSPORT;
  RecvQueue* r = reinterpret_cast<RecvQueue*>(p->base() + t->rqOff);
  if (needRecv) {
    if (t->stalled.load(std::memory_order_relaxed)) return RNR;
    bool limitHit = false;
    Take got = take_rq(p->base(), r, static_cast<uint32_t>(pid_), &w, rsg, &limitHit, &t->state, word);
    if (got == TAKE_BUSY) return TRANSPORT;  // nothing taken: retried like a lost packet
    if (got == TAKE_EMPTY) return RNR;
    if (limitHit) p->ring();
  }
  auto* rcq = reinterpret_cast<CqShared*>(p->base() + t->recvCqOff);

  if (opcode == OP_SEND || opcode == OP_SEND_WITH_IMM) {
    iovec remote[kMaxIov];
    size_t nr = 0;
    uint64_t room = 0;
    uint8_t recvStatus = WC_SUCCESS;
    bool allDirect = true;
    for (uint32_t k = 0; k < w.numSge && k < r->maxSge; k++) {
      if (rsg[k].length == 0) continue;
      MrView sv{};
      int bad = pins.check(rsg[k].lkey, rsg[k].addr, rsg[k].length, ACC_LOCAL_WRITE, &sv);
      if (bad && responderGone(t)) return TRANSPORT;
      if (bad) {
        recvStatus = bad == 1 ? WC_LOC_QP_OP_ERR : WC_LOC_PROT_ERR;
        break;
      }
      uint64_t take = room >= total ? 0 : std::min<uint64_t>(rsg[k].length, total - room);
      if (take) {
        void* d = direct(p, sv, rsg[k].addr);
        if (!d) allDirect = false;
        remote[nr++] = iovec{d ? d : reinterpret_cast<void*>(rsg[k].addr), take};
      }
      room += rsg[k].length;
    }
    if (recvStatus == WC_SUCCESS && room < total) recvStatus = WC_LOC_QP_OP_ERR;  // rxe's status for a short buffer
    if (recvStatus == WC_SUCCESS && nr > 0) {
      if (allDirect) {
        scatter_copy(remote, nr, local, nl);
      } else {
        // Mixed: move what is mapped back to remote addresses and use one system call.
        for (uint32_t k = 0, j = 0; k < w.numSge && j < nr; k++) {
          if (rsg[k].length) remote[j++].iov_base = reinterpret_cast<void*>(rsg[k].addr);
        }
        CopyResult c = copy_to_peer(p->pid(), local, nl, remote, nr);
        if (c == COPY_UNREACHABLE) return TRANSPORT;  // the WQE is spent: as a lost ACK
        if (c == COPY_FAULT) recvStatus = WC_LOC_PROT_ERR;
      }
    }
    if (recvStatus != WC_SUCCESS) {
      Cqe c{};
      c.wrId = w.wrId;
      c.status = recvStatus;
      c.qpNum = t->qpn;
      pushCqe(p->base(), rcq, c, p);
      remoteFail(p, t, word);
      *status = WC_REM_OP_ERR;
      return DONE;
    }
  } else if (opcode == OP_RDMA_WRITE || opcode == OP_RDMA_WRITE_WITH_IMM) {
    void* d = total ? direct(p, rview, remoteAddr) : nullptr;
    iovec remote{d ? d : reinterpret_cast<void*>(remoteAddr), total};
    if (d) {
      ordered_copy(remote, local, nl);
    } else if (CopyResult c = copy_to_peer(p->pid(), local, nl, &remote, total ? 1 : 0); c != COPY_OK) {
      if (c == COPY_UNREACHABLE) return TRANSPORT;
      *status = WC_REM_ACCESS_ERR;
      remoteFail(p, t, word);
      return DONE;
    }
  } else {  // READ
    void* d = total ? direct(p, rview, remoteAddr) : nullptr;
    iovec remote{d ? d : reinterpret_cast<void*>(remoteAddr), total};
    if (d) {
      scatter_copy(local, nl, &remote, 1);
    } else if (CopyResult c = copy_from_peer(p->pid(), local, nl, &remote, total ? 1 : 0); c != COPY_OK) {
      if (c == COPY_UNREACHABLE) return TRANSPORT;
      *status = WC_REM_ACCESS_ERR;
      remoteFail(p, t, word);
      return DONE;
    }
  }

  if (needRecv) {
    Cqe c{};
    c.wrId = w.wrId;
    c.status = WC_SUCCESS;
    c.opcode = opcode == OP_RDMA_WRITE_WITH_IMM ? WCO_RECV_RDMA_WITH_IMM : WCO_RECV;
    c.byteLen = static_cast<uint32_t>(total);
    c.imm = withImm ? imm : 0;
    c.flags = withImm ? WC_FLAG_WITH_IMM : 0;
    c.qpNum = t->qpn;
    c.srcQp = srcQpn;
    if (pushCqe(p->base(), rcq, c, p, kCommitWaitNs) != PUSHED) {
      // The receiver's CQ overran (or a stopped process holds it past the bound, with the
      // receive already taken): its QP fails, and this side sees a dead responder.
      remoteFail(p, t, word);
      return TRANSPORT;
    }
  }
  return DONE;
}

// ---------------------------------------------------------------- TCP link

int Device::toRtrLink(int h, uint32_t peerPid, uint32_t peerSlot, uint32_t peerGen, uint32_t peerQpn,
                      uint32_t minRnrTimer) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  if (state_code(s->state.load()) != QPS_INIT) return EINVAL;
  q.link = true;
  q.peer.reset();
  q.peerSlot = peerSlot;
  q.peerGen = peerGen;
  q.peerQpn = peerQpn;
  s->minRnrTimer = minRnrTimer;
  s->peerPid = peerPid;
  s->peerQpn = peerQpn;
  return transition(s, bit(QPS_INIT), QPS_RTR) ? 0 : EINVAL;
}

double Device::linkTake(int h, double* hdr, uint8_t* payload, size_t cap) {
  Qp& q = *qp(h);
  if (!q.linkReady || q.sqHead == q.sqTail) return 0;
  SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
  iovec local[kMaxIov];
  size_t nl = 0;
  uint64_t total = 0;
  uint8_t status = WC_SUCCESS;
  if (!gatherLocal(q, e, local, &nl, &total, &status)) {
    // Failed locally after all (e.g. its MR was deregistered): complete it here.
    q.linkReady = false;
    if (settle(q, e, DONE, status, 0, 12)) progress(q);
    return 0;
  }
  if (e.opcode != OP_RDMA_READ && total > cap) return -static_cast<double>(total);
  q.linkReady = false;
  q.linkInflight = true;
  q.linkToken = e.seq + 1;  // names the WR, not the attempt: resends carry the same token
  // Like an unacknowledged packet: no answer within the ACK timeout is a transport error
  // (infinite retries still give up on this frame and send it again).
  q.linkDeadline = now_ms() + ack_timeout_ms(q.timeout);
  block(q, q.linkDeadline);
  hdr[9] = q.linkToken;
  hdr[0] = e.opcode;
  hdr[1] = e.imm;
  hdr[2] = static_cast<double>(e.remoteAddr);
  hdr[3] = e.rkey;
  hdr[4] = static_cast<double>(total);
  hdr[5] = q.peerSlot;
  hdr[6] = q.peerGen;
  hdr[7] = qpShared(q.slot)->qpn;
  hdr[8] = static_cast<double>(pid_);
  if (e.opcode != OP_RDMA_READ) {
    iovec out{payload, total};
    scatter_copy(&out, 1, local, nl);
  }
  return 1;
}

void Device::linkDone(int h, uint32_t token, int outcome, uint8_t status, uint32_t rnrTimer, const uint8_t* data,
                      size_t len) {
  Qp& q = *qp(h);
  // Only an answer for the head WR counts (flushed, reset, or older WRs are ignored). It
  // may come after that WR's frame timed out: it still completes the WR.
  if (!q.link || q.sqHead == q.sqTail || token != q.sq[q.sqHead % q.maxSendWr].seq + 1) return;
  if (!q.linkInflight && !q.linkReady && q.blockedUntil == 0) return;
  q.linkInflight = false;
  q.linkReady = false;
  unblock(q);  // the answer beat the deadline
  SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
  iovec local[kMaxIov];
  size_t nl = 0;
  uint64_t total = 0;
  uint8_t st = WC_SUCCESS;
  if (!gatherLocal(q, e, local, &nl, &total, &st)) {
    outcome = DONE;
    status = st;
  } else if (outcome == DONE && status == WC_SUCCESS && e.opcode == OP_RDMA_READ) {
    if (len != total) {
      status = WC_REM_OP_ERR;
    } else {
      iovec in{const_cast<uint8_t*>(data), len};
      scatter_copy(local, nl, &in, 1);
    }
  }
  q.linkRnrTimer = rnrTimer;
  // DELAY and LINK are internal: a peer answering them is treated as a lost frame.
  Outcome o = outcome == DONE || outcome == RNR ? static_cast<Outcome>(outcome) : TRANSPORT;
  if (settle(q, e, o, status, static_cast<uint32_t>(total), rnrTimer)) progress(q);
}

int Device::respond(uint32_t slot, uint32_t gen, uint8_t opcode, uint8_t* payload, size_t len, uint32_t imm,
                    uint64_t remoteAddr, uint32_t rkey, uint32_t srcQpn, uint32_t srcPid, uint32_t* rnrTimer) {
  *rnrTimer = 12;
  if (slot >= kQpSlots || opcode > OP_RDMA_READ) return TRANSPORT << 8;
  // Longer than the port's max_msg_sz: an invalid request, as rxe answers it (the
  // initiator's own post is refused before; this is a peer that did not).
  if (len > DeviceLimits::maxMsg) return (DONE << 8) | WC_REM_INV_REQ_ERR;
  QpShared* t = qpShared(slot);
  if (t->gen.load(std::memory_order_acquire) != gen || t->linkBroken.load()) return TRANSPORT << 8;
  if (!selfPeer_) {
    try {
      selfPeer_ = std::make_shared<PeerSegment>(pid_, seg_.memfd(), seg_.eventfd());
    } catch (const SysError&) {
      return TRANSPORT << 8;
    }
  }
  *rnrTimer = t->minRnrTimer;
  iovec local{payload, len};
  uint8_t status = WC_SUCCESS;
  Outcome o = deliver(selfPeer_.get(), t, gen, opcode, &local, len ? 1 : 0, len, imm, remoteAddr, rkey, srcQpn, srcPid,
                      &status);
  return (static_cast<int>(o) << 8) | status;
}

// ---------------------------------------------------------------- faults and events

void Device::injectBreakLink(int h) {
  Qp& q = *qp(h);
  qpShared(q.slot)->linkBroken.store(1);
  if (q.peer) {
    QpShared* t = reinterpret_cast<QpShared*>(q.peer->base() + q.peer->layout().qpTableOff) + q.peerSlot;
    if (t->gen.load() == q.peerGen) t->linkBroken.store(1);
  }
}

void Device::injectStall(int h, bool on) { qpShared(qp(h)->slot)->stalled.store(on ? 1 : 0); }

void Device::injectDelay(int h, double ms) { qp(h)->delayMs = ms; }

void Device::injectPeerPin(int h, uint32_t rkey, bool hold) {
  Qp& q = *qp(h);
  if (!q.peer || (rkey >> 8) >= q.peer->layout().mrSlots) return;
  MrEntry& m = mr_table(q.peer->base(), q.peer->layout())[rkey >> 8];
  if (hold) m.pins.fetch_add(1, std::memory_order_seq_cst);
  else if (m.pins.load() > 0) m.pins.fetch_sub(1, std::memory_order_seq_cst);
}

uint32_t Device::busyQps() {
  uint32_t n = 0;
  for (auto& [h, q] : qps_) n += qpShared(q->slot)->pins.load(std::memory_order_acquire) != 0;
  return n;
}

void Device::injectHoldPeerLock(int h) {
  Qp& q = *qp(h);
  if (!q.peer) return;
  QpShared* t = reinterpret_cast<QpShared*>(q.peer->base() + q.peer->layout().qpTableOff) + q.peerSlot;
  if (sane_queues(q.peer.get(), t)) reinterpret_cast<RecvQueue*>(q.peer->base() + t->rqOff)->lock.lock(static_cast<uint32_t>(pid_));
}

void Device::onDoorbell(std::vector<std::pair<int, int>>& events) {
  for (auto& [h, q] : qps_) {
    QpShared* s = qpShared(q->slot);
    uint32_t failed = s->remoteError.exchange(0);
    if (failed && failed == s->state.load(std::memory_order_acquire)) {
      flushQp(*q);
      events.emplace_back(EV_QP_FATAL, h);
    }
  }
  for (auto& [h, c] : cqs_) {
    auto* cq = reinterpret_cast<CqShared*>(seg_.base() + c.off);
    if (cq->overrun.load() && !c.errReported) {
      c.errReported = true;
      events.emplace_back(EV_CQ_ERR, h);
    }
  }
  for (auto& [h, r] : srqs_) {
    if (rq(r.off)->limitReached.exchange(0)) events.emplace_back(EV_SRQ_LIMIT, h);
  }
  for (auto& [h, q] : qps_) {
    if (q->linkReady) events.emplace_back(EV_LINK, h);
  }
  events.emplace_back(EV_DOORBELL, 0);
}

}  // namespace soft

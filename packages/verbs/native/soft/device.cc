// The soft device: its segment, its lifetime and the doorbell that turns what peers left
// in the segment into events. The concepts it serves are in mr, cq, recv, qp, send, link and
// faults (.cc); what they share is engine.h.

#include <sys/prctl.h>
#include <unistd.h>

#include <fstream>
#include <mutex>

#include "engine.h"

namespace soft {

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
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

Device::Device() : pid_(getpid()), holder_(self_holder(pid_)) {
  allow_same_user_peers();
  std::random_device rd;
  uint32_t expected = 0;
  g_qpnMask.compare_exchange_strong(expected, (rd() & 0xffffff) | 0x1000000);  // bit 24: set once
  mrSlotFree_.assign(kMrSlots, true);
  mrSlotFree_[0] = false;  // slot 0 is never used: a zeroed table holds no region
  mrKeys_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  freeQpSlots_.reserve(kQpSlots);
  for (uint32_t s = kQpSlots; s-- > 0;) freeQpSlots_.push_back(s);
  qpBySlot_.assign(kQpSlots, nullptr);
}

void Device::quiesceQps() {
  for (auto& [h, q] : qps_) {
    QpShared* sh = qpShared(q->slot);
    transition(sh, kAnyState, QPS_RESET);
    sh->gen.store(q->gen + 1, std::memory_order_seq_cst);
  }
}

Device::~Device() {
  // Completions already pushed to peers are theirs: their owed doorbells go first.
  ringOwed();
  // As the kernel tears down a dying process: QPs first (peers now see no responder and end
  // in RETRY_EXC_ERR), then the registrations, waiting for copies already under way.
  quiesceQps();
  revokeMrs();
  qps_.clear();
  seg_.retire();
}

void Device::ringPeer(const PeerSegment* p) {
  if ((ringHolds_ > 0 || jobHeld_) && !p->ringsInto()) {
    if (p->ringOwed) return;
    std::shared_ptr<const PeerSegment> keep = p->weak_from_this().lock();
    if (keep) {
      // Owed once: the reference keeps its eventfd open until it is rung.
      p->ringOwed = true;
      owedRings_.push_back(std::move(keep));
      return;
    }
  }
  ringsRung_++;
  p->ring();
}

void Device::ringOwed() {
  emptyLooks_ = 0;
  if (owedRings_.empty()) return;
  for (auto& p : owedRings_) {
    p->ringOwed = false;
    ringsRung_++;
    p->ring();
  }
  owedRings_.clear();  // keeps its capacity: no allocation per batch
}

void Device::ringSelf() {
  if (deferSelfRing) {
    selfRung_ = true;
    return;
  }
  uint64_t one = 1;
  ssize_t r = write(seg_.eventfd(), &one, sizeof one);
  (void)r;
}

QpShared* Device::qpShared(uint32_t slot) {
  return reinterpret_cast<QpShared*>(seg_.base() + seg_.layout().qpTableOff) + slot;
}

MrEntry* Device::mrEntry(uint32_t slot) { return mr_table(seg_.base(), seg_.layout()) + slot; }

void Device::onDoorbell(std::vector<std::pair<int, int>>& events, std::vector<uint32_t>& ready) {
  if (seg_.header()->attention.exchange(0, std::memory_order_acq_rel)) {
    for (auto& [h, q] : qps_) {
      QpShared* s = qpShared(q->slot);
      uint32_t failed = s->remoteError.exchange(0);
      if (failed && failed == s->state.load(std::memory_order_acquire)) {
        flushQp(*q);
        events.emplace_back(EV_QP_FATAL, h);
        oweLastWqe(*q);
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
  }
  if (lastWqeAttention_) {
    lastWqeAttention_ = false;
    for (auto& [h, q] : qps_) {
      if (!q->lastWqeOwed) continue;
      q->lastWqeOwed = false;
      // "Last WQE reached": a peer inside an operation on this QP may still be placing into
      // a WQE it took from the SRQ; it finishes first (bounded, as on reset).
      drainPins(qpShared(q->slot));
      events.emplace_back(EV_QP_LAST_WQE, h);
    }
  }
  if (linkAttention_) {
    // Reported on every doorbell until JS takes it, as before: stays set while any is ready.
    linkAttention_ = false;
    for (auto& [h, q] : qps_) {
      if (q->linkReady) {
        events.emplace_back(EV_LINK, h);
        linkAttention_ = true;
      }
    }
  }
  readyCqs(ready);
}

}  // namespace soft

// Completion queues in the segment: peers push completions, the owner polls and arms.

#include "engine.h"

namespace soft {

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
  if (it->second.tainted)
    quarantined_.push_back(Quarantined{it->second.off, 0});
  else
    seg_.free(it->second.off);
  cqs_.erase(it);
  return 0;
}

uint32_t Device::cqCapacity(int h) { return cqAt(h)->capacity; }

uint32_t Device::cqCount(int h) {
  if (blockedCount_ && now_ms() >= nextDeadline_) progressDue(false);
  CqShared* cq = cqAt(h);
  uint32_t n = __atomic_load_n(&cq->count, __ATOMIC_ACQUIRE);
  if (n == 0) lookedEmpty();
  return n;
}

uint32_t Device::armCq(int h, bool solicitedOnly) {
  auto it = cqs_.find(h);
  if (it == cqs_.end()) return 0;
  auto* cq = reinterpret_cast<CqShared*>(seg_.base() + it->second.off);
  it->second.arm = solicitedOnly ? ARM_SOLICITED : ARM_NEXT;
  cq->armed.store(it->second.arm, std::memory_order_seq_cst);
  uint32_t n = __atomic_load_n(&cq->count, __ATOMIC_SEQ_CST);
  if (n > 0) {
    // Already there: the caller delivers, the arm is used up. Left set, the next push
    // would ring a doorbell nobody waits on (a wake-up and a scan for nothing).
    cq->armed.store(ARM_NONE, std::memory_order_relaxed);
    return n;
  }
  if (!it->second.watched) {
    it->second.watched = true;
    armedCqs_.push_back(h);
  }
  return n;
}

void Device::readyCqs(std::vector<uint32_t>& ready) {
  size_t keep = 0;
  for (int h : armedCqs_) {
    auto it = cqs_.find(h);
    if (it == cqs_.end()) continue;  // destroyed while armed
    auto* cq = reinterpret_cast<CqShared*>(seg_.base() + it->second.off);
    // Re-arm before counting: a push may have used up the arm and a poll taken its
    // completion since; the next push must still ring. Armed for any completion, any count
    // is ready. Solicited-only, completions that did not use up the arm (unsolicited ones,
    // the owner's own sends) are no reason to wake: only an arm a push used up is.
    bool due;
    if (it->second.arm == ARM_SOLICITED) {
      bool used = cq->armed.exchange(ARM_SOLICITED, std::memory_order_seq_cst) == ARM_NONE;
      due = used && __atomic_load_n(&cq->count, __ATOMIC_SEQ_CST) > 0;
    } else {
      cq->armed.store(ARM_NEXT, std::memory_order_seq_cst);
      due = __atomic_load_n(&cq->count, __ATOMIC_SEQ_CST) > 0;
    }
    if (due) {
      it->second.watched = false;
      ready.push_back(static_cast<uint32_t>(h));
    } else {
      armedCqs_[keep++] = h;
    }
  }
  armedCqs_.resize(keep);
}

Device::Push Device::pushCqe(uint8_t* base, CqShared* cq, const Cqe& e, const PeerSegment* peer, int64_t budgetNs) {
  if (!cq->lock.lock(holder_, budgetNs)) return PUSH_BUSY;
  if (cq->count == cq->capacity) {
    cq->lock.unlock();
    cq->overrun.store(1, std::memory_order_release);
    flag_attention(base);
    if (peer)
      ringPeer(peer);
    else
      ringSelf();
    return PUSH_FULL;
  }
  Cqe* entries = reinterpret_cast<Cqe*>(base + cq->entriesOff);
  entries[(cq->head + cq->count) % cq->capacity] = e;
  __atomic_store_n(&cq->count, cq->count + 1, __ATOMIC_RELEASE);
  cq->lock.unlock();
  // Dekker with armCq (store armed, load count): without a full fence the store of
  // count and the load of armed may reorder and both sides miss the wake-up.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Solicited-only (ibv_req_notify_cq's solicited_only): the receive of a solicited SEND or
  // WRITE_WITH_IMM, or any failed completion, uses up the arm; others are only queued.
  uint32_t arm = cq->armed.load(std::memory_order_seq_cst);
  if ((arm == ARM_NEXT || (arm == ARM_SOLICITED && (e.solicited || e.status != WC_SUCCESS))) &&
      cq->armed.compare_exchange_strong(arm, ARM_NONE)) {
    if (peer)
      ringPeer(peer);
    else
      ringSelf();
  }
  return PUSHED;
}

int Device::pollCq(int h, double* out, int max, bool armIfEmpty) {
  if (blockedCount_ && now_ms() >= nextDeadline_) progressDue(false);
  CqShared* cq = cqAt(h);
  // Armed, one came meanwhile (armCq counts after the arm and disarms): it is taken now.
  if (__atomic_load_n(&cq->count, __ATOMIC_ACQUIRE) == 0 && (!armIfEmpty || armCq(h, false) == 0)) {
    lookedEmpty();
    return 0;
  }
  Cqe* entries = reinterpret_cast<Cqe*>(seg_.base() + cq->entriesOff);
  // A peer stopped inside its push holds the lock: nothing can be taken now, try later. With
  // armIfEmpty the CQ is not armed (completions are there), which the caller must know: its
  // next wait arms itself instead of sleeping on an arm that is not set.
  if (!cq->lock.lock(holder_)) return armIfEmpty ? rdmajs::abi::POLL_NOT_ARMED : 0;
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
      // sqSeq is the send_token of the WR it retires: retired up to and including it when it
      // lies within what is posted and not yet retired (a stale one, from before a reset,
      // retires nothing).
      if (q && q->gen == e.qpGen) {
        uint64_t d = tokens_after(q->sqRetired - 1, e.sqSeq);
        if (d > 0 && d <= q->sqTail - q->sqRetired) q->sqRetired += d;
      }
    }
  }
  cq->head = (cq->head + n) % cq->capacity;
  cq->count -= n;
  cq->lock.unlock();
  return n;
}

}  // namespace soft

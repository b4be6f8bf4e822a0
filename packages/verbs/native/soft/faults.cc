// Faults and test hooks (inject): a broken link, a stalled receiver, delays, a peer holding
// a lock or a pin; and the count of QPs a peer is inside.

#include "engine.h"

namespace soft {

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
  if (!q.peer) return;
  // The pin is dropped by slot: by then the region may be deregistered (its key revoked).
  auto held = injectedPins_.find(rkey);
  uint32_t slot = hold ? find_mr(q.peer->base(), q.peer->layout(), rkey)
                       : (held == injectedPins_.end() ? UINT32_MAX : held->second);
  if (slot == UINT32_MAX) return;
  if (hold) injectedPins_[rkey] = slot;
  else injectedPins_.erase(held);
  MrEntry& m = mr_table(q.peer->base(), q.peer->layout())[slot];
  if (hold)
    m.pins.fetch_add(1, std::memory_order_seq_cst);
  else if (m.pins.load() > 0)
    m.pins.fetch_sub(1, std::memory_order_seq_cst);
}

uint32_t Device::busyQps() {
  uint32_t n = 0;
  for (auto& [h, q] : qps_) n += qpShared(q->slot)->pins.load(std::memory_order_acquire) != 0;
  return n;
}

void Device::injectHoldPeerLock(int h, double ms) {
  Qp& q = *qp(h);
  if (!q.peer) return;
  QpShared* t = reinterpret_cast<QpShared*>(q.peer->base() + q.peer->layout().qpTableOff) + q.peerSlot;
  if (!sane_queues(q.peer.get(), t)) return;
  SpinLock& l = reinterpret_cast<RecvQueue*>(q.peer->base() + t->rqOff)->lock;
  if (l.holder.load(std::memory_order_acquire) != holder_ && !l.lock(holder_)) return;
  if (ms <= 0) return;  // for good
  // Held for `ms` more, asleep but not stopped (as a holder preempted inside its section),
  // then let go. This thread is busy meanwhile: the process answers nothing else.
  for (int64_t end = mono_ns() + static_cast<int64_t>(ms * 1e6), now; (now = mono_ns()) < end;)
    nap_ns(std::min<int64_t>(end - now, kLockNapMaxNs));
  l.unlock();
}

}  // namespace soft

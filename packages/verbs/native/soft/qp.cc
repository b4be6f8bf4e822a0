// Queue pairs: creation, the state machine and its transitions (RTR maps the peer), reset
// and destruction, which wait for peers inside an operation.

#include "engine.h"

namespace soft {

// Only for handles checked with hasQp (the adapter does).
Qp* Device::qp(int h) {
  auto it = qps_.find(h);
  return it == qps_.end() ? nullptr : it->second.get();
}

int Device::createQp(int sendCq, int recvCq, int srq, uint32_t maxSendWr, uint32_t maxRecvWr, uint32_t maxSendSge,
                     uint32_t maxRecvSge, uint32_t maxInline) {
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
  s->qpn = next_qpn();
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
    if (quiet)
      seg_.free(q.rqOff);
    else
      quarantined_.push_back(Quarantined{q.rqOff, 0});
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
  if (quiet)
    freeQpSlots_.push_back(q.slot);
  else
    drainingSlots_.push_back(q.slot);
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
  q.sqHead = q.sqRetired = q.linkSent = q.sqTail;
  RecvQueue* r = rq(s->rqOff);
  if (!s->hasSrq) {
    if (quiet && r->lock.lock(holder_)) {
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
  q.link = q.linkReady = false;
  q.lastWqeRaised = false;  // the next error reports again (an owed event is still delivered)
  q.peer.reset();
  return 0;
}

void Device::moveToError(Qp& q) {
  transition(qpShared(q.slot), kAnyState, QPS_ERR);
  flushQp(q);
  oweLastWqe(q);
}

void Device::oweLastWqe(Qp& q) {
  // IB spec: a QP on an SRQ that enters ERR reports LAST_WQE_REACHED, once for that error.
  // Delivered from the doorbell, after any QP_FATAL, once no peer is inside the QP.
  if (q.srq < 0 || q.lastWqeRaised) return;
  q.lastWqeRaised = q.lastWqeOwed = true;
  lastWqeAttention_ = true;
  ringSelf();
}

void Device::flushQp(Qp& q) {
  q.linkReady = false;  // a late answer from the link is then ignored (sqHead == sqTail)
  unblock(q);
  auto* scq = reinterpret_cast<CqShared*>(seg_.base() + q.sendCqOff);
  QpShared* s = qpShared(q.slot);
  for (; q.sqHead != q.sqTail; q.sqHead++) {
    SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
    Cqe c{};
    c.wrId = e.wrId;
    c.status = WC_WR_FLUSH_ERR;
    c.qpNum = s->qpn;
    c.sqSeq = send_token(e.seq);
    c.qpSlot = q.slot;
    c.qpGen = q.gen;
    if (pushCqe(seg_.base(), scq, c, nullptr) == PUSH_BUSY) break;  // bounded: the rest are not reported
  }
  q.linkSent = q.sqHead;  // nothing of this QP is on the wire any more
  if (!s->hasSrq) flushRecvQueue(seg_.base(), rq(s->rqOff), s->recvCqOff, s->qpn, nullptr);
}

PostResult Device::postRecv(int h, const double* wrs, size_t words, int count) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  uint32_t st = state_code(s->state.load());
  if (st == QPS_RESET || s->hasSrq) return {0, POST_EINVAL};
  PostResult rc = post_rq(seg_.base(), rq(s->rqOff), holder_, wrs, words, count);
  // The specification flushes receives posted in ERR at once (rxe waits for the next
  // transition to ERR; documented difference).
  if (st == QPS_ERR) flushRecvQueue(seg_.base(), rq(s->rqOff), s->recvCqOff, s->qpn, nullptr);
  return rc;
}

}  // namespace soft

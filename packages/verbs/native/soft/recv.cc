// Receive queues: a QP's own and shared receive queues (SRQ), and their flush.

#include "engine.h"

namespace soft {

void Device::flushRecvQueue(uint8_t* base, RecvQueue* r, uint64_t cqOff, uint32_t qpNum, const PeerSegment* peer) {
  auto* cq = reinterpret_cast<CqShared*>(base + cqOff);
  for (;;) {
    RecvWqe w;
    WireSge sg[kMaxIov];
    bool lim;
    if (take_rq(base, r, holder_, &w, sg, &lim) != TAKEN) break;
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
  if (it->second.tainted)
    quarantined_.push_back(Quarantined{it->second.off, 0});
  else
    seg_.free(it->second.off);
  srqs_.erase(it);
  return 0;
}

PostResult Device::postSrqRecv(int h, const double* wrs, size_t words, int count) {
  auto it = srqs_.find(h);
  if (it == srqs_.end()) return {0, POST_EINVAL};
  return post_rq(seg_.base(), rq(it->second.off), holder_, wrs, words, count);
}

void Device::armSrqLimit(int h, uint32_t limit) {
  auto it = srqs_.find(h);
  if (it != srqs_.end()) rq(it->second.off)->limit.store(limit);
}

}  // namespace soft

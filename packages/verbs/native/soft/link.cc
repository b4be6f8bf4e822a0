// The TCP link side: WRs handed to JS to carry over a socket (linkTake, linkDone) and the
// target running a peer's operation (respond).

#include <sys/socket.h>

#include "copy.h"
#include "engine.h"

namespace soft {

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

bool Device::linkTakeable(int h) {
  Qp& q = *qp(h);
  if (!q.link || q.linkSent == q.sqTail) return false;
  // The head goes out once progress() found it ready; later WRs follow it while it is on
  // the wire, up to the window (one at a time under an injected per-operation delay).
  if (!q.linkOnWire()) return q.linkReady;
  uint32_t window = q.delayMs > 0 ? 1 : kLinkWindow;
  if (q.linkSent - q.sqHead >= window) return false;
  QpShared* s = qpShared(q.slot);
  return state_code(s->state.load()) == QPS_RTS && !s->linkBroken.load(std::memory_order_relaxed);
}

int Device::linkTake(int h, double* hdr, uint8_t* payload, size_t cap, bool defer) {
  if (!linkTakeable(h)) return LINK_TAKE_NONE;
  Qp& q = *qp(h);
  q.linkDeferred = 0;
  bool onWire = q.linkOnWire();
  QpShared* s = qpShared(q.slot);
  SendEntry& e = q.sq[q.linkSent % q.maxSendWr];
  iovec local[kMaxIov];
  size_t nl = 0;
  uint64_t total = 0;
  uint8_t status = WC_SUCCESS;
  if (!gatherLocal(q, e, local, &nl, &total, &status)) {
    if (onWire) return LINK_TAKE_NONE;  // completed with its local error once it is the head, in order
    // Failed locally after all (e.g. its MR was deregistered): complete it here.
    q.linkReady = false;
    if (settle(q, e, DONE, status, 0, LINK_NO_RNR)) progress(q);
    return LINK_TAKE_NONE;
  }
  // An atomic's request carries its operands; its local SGE only receives the answer.
  bool atomic = is_atomic(e.opcode);
  uint64_t wire = atomic ? sizeof e.operands : total;
  defer = defer && !atomic && e.opcode != OP_RDMA_READ;
  if (e.opcode != OP_RDMA_READ && wire > cap) {
    hdr[LINK_LENGTH] = static_cast<double>(wire);
    hdr[LINK_HEAD] = onWire ? 0 : 1;  // 0: behind a WR on the wire, whose ACK timer runs
    return LINK_TAKE_NEEDS_BUFFER;
  }
  if (!onWire) {
    q.linkReady = false;
    // Like an unacknowledged packet: no answer and no bytes moving within the ACK timeout
    // costs a retry (linkProgress restarts the timer while the connection moves bytes).
    block(q, now_ms() + ack_timeout_ms(q.timeout));
  }
  q.linkSent++;
  hdr[LINK_TOKEN] = send_token(e.seq);  // names the WR, not the attempt: resends carry the same one
  // The head of the queue: the target takes it even after WRs it discarded.
  hdr[LINK_HEAD] = onWire ? 0 : 1;
  hdr[LINK_OPCODE] = e.opcode;
  hdr[LINK_IMM] = e.imm;
  hdr[LINK_REMOTE_ADDR] = static_cast<double>(e.remoteAddr);
  hdr[LINK_RKEY] = e.rkey;
  hdr[LINK_LENGTH] = static_cast<double>(wire);
  hdr[LINK_DST_SLOT] = q.peerSlot;
  hdr[LINK_DST_GEN] = q.peerGen;
  hdr[LINK_SRC_QPN] = s->qpn;
  hdr[LINK_SRC_PID] = static_cast<double>(pid_);
  // IBV_SEND_SOLICITED travels with the WR (LINK_FLAG_SOLICITED), as on shared memory.
  hdr[LINK_SOLICITED] = e.solicited != 0 && consumes_recv(e.opcode) ? 1 : 0;
  if (defer) {
    q.linkDeferred = e.seq + 1;  // linkWrite sends it from where it lies
  } else if (atomic) {
    std::memcpy(payload, e.operands, sizeof e.operands);  // little-endian, as the wire says
  } else if (e.opcode != OP_RDMA_READ) {
    iovec out{payload, total};
    scatter_copy(&out, 1, local, nl);
  }
  return linkTakeable(h) ? LINK_TAKE_READY : LINK_TAKE_LAST;
}

int64_t Device::linkWrite(int h, int fd, uint8_t* frame, size_t hdrBytes, size_t frameBytes) {
  Qp& q = *qp(h);
  uint64_t deferred = q.linkDeferred;
  q.linkDeferred = 0;
  if (!q.link || deferred == 0 || q.linkSent == q.sqHead) return -1;
  SendEntry& e = q.sq[(q.linkSent - 1) % q.maxSendWr];
  if (e.seq + 1 != deferred) return -1;
  iovec iov[kMaxIov + 1];
  size_t nl = 0;
  uint64_t total = 0;
  uint8_t status = WC_SUCCESS;
  // Checked by the take just before (nothing ran in between): still there.
  if (!gatherLocal(q, e, iov + 1, &nl, &total, &status)) return -1;
  if (hdrBytes > frameBytes || total > frameBytes - hdrBytes) return -1;
  iov[0] = iovec{frame, hdrBytes};
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = nl + 1;
  ssize_t n = fd >= 0 ? sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : -1;
  uint64_t sent = n > 0 ? static_cast<uint64_t>(n) : 0;
  if (sent < hdrBytes + total) {
    // The rest at its place in the frame: payload bytes [skip, total).
    uint64_t skip = sent > hdrBytes ? sent - hdrBytes : 0;
    size_t k = 1;
    while (k <= nl && skip >= iov[k].iov_len) skip -= iov[k++].iov_len;
    if (k <= nl) {
      iov[k].iov_base = static_cast<uint8_t*>(iov[k].iov_base) + skip;
      iov[k].iov_len -= skip;
      uint64_t from = sent > hdrBytes ? sent - hdrBytes : 0;
      iovec out{frame + hdrBytes + from, total - from};
      scatter_copy(&out, 1, iov + k, nl + 1 - k);
    }
  }
  return static_cast<int64_t>(sent);
}

void Device::linkProgress(int h) {
  Qp& q = *qp(h);
  if (!q.link || !q.linkOnWire() || q.blockedUntil == 0) return;
  // Bytes moved for this QP's frames: the peer is alive, so the timer measures silence,
  // not message size, and the head gets its retries back as an ACK would give them.
  SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
  e.retryLeft = q.timeout == 0 ? -1 : static_cast<int32_t>(std::max<uint32_t>(q.retryCount, 1));
  block(q, now_ms() + ack_timeout_ms(q.timeout));
}

bool Device::linkDone(int h, uint32_t token, int outcome, uint8_t status, uint32_t rnrTimer, const uint8_t* data,
                      size_t len) {
  Qp& q = *qp(h);
  // Answers come in send-queue order (one connection, run in order by the target); only
  // the head's counts, and only while it is on the wire (flushed or reset WRs are ignored).
  // A discarded frame says nothing: it goes out again after the WR that failed before it.
  if (!q.link || !q.linkOnWire() || outcome == DISCARDED) return linkTakeable(h);
  SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
  if (token != send_token(e.seq)) return linkTakeable(h);
  unblock(q);  // the answer beat the deadline
  iovec local[kMaxIov];
  size_t nl = 0;
  uint64_t total = 0;
  uint8_t st = WC_SUCCESS;
  if (!gatherLocal(q, e, local, &nl, &total, &st)) {
    outcome = DONE;
    status = st;
  } else if (outcome == DONE && status == WC_SUCCESS && (e.opcode == OP_RDMA_READ || is_atomic(e.opcode))) {
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
  if (o != DONE) {
    // Not run: the target discards what followed it, and all of it goes out again from
    // the head once its wait is over (as RC resends from the NAKed PSN).
    q.linkSent = q.sqHead;
    q.linkReady = false;
  }
  if (settle(q, e, o, status, static_cast<uint32_t>(total), rnrTimer)) {
    // The next WR on the wire gets a full ACK timeout of its own.
    if (q.linkOnWire()) block(q, now_ms() + ack_timeout_ms(q.timeout));
    progress(q);
  }
  return linkTakeable(h);
}

PeerSegment* Device::selfPeer() {
  if (!selfPeer_) {
    try {
      selfPeer_ = std::make_shared<PeerSegment>(pid_, seg_.memfd(), seg_.eventfd());
      selfPeer_->ringInto(&selfRung_);
    } catch (const SysError&) {
      return nullptr;
    }
  }
  return selfPeer_.get();
}

Answer Device::respond(uint32_t slot, uint32_t gen, uint8_t opcode, uint8_t* payload, size_t len, uint32_t imm,
                       uint64_t remoteAddr, uint32_t rkey, uint32_t srcQpn, uint32_t srcPid, bool placed,
                       bool solicited) {
  const Answer transport{TRANSPORT, WC_SUCCESS, LINK_NO_RNR};
  const Answer invalid{DONE, WC_REM_INV_REQ_ERR, LINK_NO_RNR};
  if (slot >= kQpSlots || opcode > OP_LAST) return transport;
  if (placed && opcode != OP_RDMA_WRITE) return invalid;  // only plain WRITEs are placed ahead
  // An atomic arrives as its two operands; the prior value is written over them.
  bool atomic = is_atomic(opcode);
  uint64_t operands[ATOMIC_OPERAND_WORDS];
  if (atomic) {
    if (len != sizeof operands) return invalid;
    std::memcpy(operands, payload, sizeof operands);
    len = ATOMIC_BYTES;
  }
  // Longer than the port's max_msg_sz: an invalid request, as rxe answers it (the
  // initiator's own post is refused before; this is a peer that did not).
  if (len > DeviceLimits::maxMsg) return invalid;
  QpShared* t = linkTarget(slot, gen);
  PeerSegment* self = t ? selfPeer() : nullptr;
  if (!self) return transport;
  iovec local{payload, len};
  uint8_t status = WC_SUCCESS;
  Outcome o = deliver(self, t, gen, opcode, &local, len ? 1 : 0, len, imm, remoteAddr, rkey, srcQpn, srcPid, &status,
                      atomic ? operands : nullptr, 0, placed, solicited && consumes_recv(opcode));
  return Answer{o, status, t->minRnrTimer};
}

QpShared* Device::linkTarget(uint32_t slot, uint32_t gen) {
  if (slot >= kQpSlots) return nullptr;
  QpShared* t = qpShared(slot);
  if (t->gen.load(std::memory_order_acquire) != gen || t->linkBroken.load()) return nullptr;
  return t;
}

bool Device::place(uint32_t slot, uint32_t gen, uint64_t remoteAddr, uint32_t rkey, uint64_t total, uint32_t srcQpn,
                   uint32_t srcPid, uint64_t at, const uint8_t* bytes, size_t n) {
  if (total == 0 || total > DeviceLimits::maxMsg || at > total || n > total - at) return false;
  QpShared* t = linkTarget(slot, gen);
  PeerSegment* self = t ? selfPeer() : nullptr;
  if (!self) return false;
  // deliver's checks for an RDMA WRITE (the same functions); any failure leaves the answer to it.
  QpPin held(t);
  uint32_t word = 0;
  if (!acceptsFrom(t, gen, srcQpn, srcPid, &word)) return false;
  MrPins pins(self->base(), self->layout());
  MrView v{};
  if (checkRemote(t, pins, ACC_REMOTE_WRITE, rkey, remoteAddr, total, &v) != WC_SUCCESS) return false;
  if (n == 0) return true;
  void* d = direct(self, v, remoteAddr);  // this process: the address itself
  if (!d) return false;
  // Pieces come in order and each stores its last byte last: a reader polling the WRITE's
  // last byte sees the whole of it, as with respond's one copy.
  iovec src{const_cast<uint8_t*>(bytes), n};
  ordered_copy(iovec{static_cast<uint8_t*>(d) + at, n}, &src, 1);
  return true;
}

}  // namespace soft

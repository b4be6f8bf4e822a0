// The send engine: posts, and the initiator carrying each WR out against the peer's segment
// (execute, deliver), settling its completion, with RNR/ack-timeout retries.
// Over 500 lines on purpose: one state machine per WR (post → execute → settle, retried)
// whose steps share the queue locks and must be read together; link I/O lives in link.cc.

#include <sys/uio.h>
#include <time.h>

#include "copy.h"
#include "engine.h"

namespace soft {

PostResult Device::postSend(int h, const double* wrs, size_t words, int count) {
  Qp& q = *qp(h);
  QpShared* s = qpShared(q.slot);
  uint32_t st = state_code(s->state.load());
  if (st == QPS_RESET || st == QPS_INIT || st == QPS_RTR) return {0, POST_EINVAL};
  size_t p = 0;
  PostResult rc{static_cast<uint32_t>(count), POST_OK};
  for (int i = 0; i < count; i++) {
    if (q.sqTail - q.sqRetired >= q.maxSendWr) {
      rc = {static_cast<uint32_t>(i), POST_ENOMEM};
      break;
    }
    // A WR that overruns `words`, names more SGEs than the queue holds or an opcode this
    // provider does not know is refused here: nothing is read past the array, and an
    // unknown opcode is never carried out as some other operation.
    uint32_t numSge = p + SEND_WR_HEADER_WORDS <= words ? to_u32(wrs[p + SEND_WR_NUM_SGE]) : UINT32_MAX;
    double op = p + SEND_WR_HEADER_WORDS <= words ? wrs[p + SEND_WR_OPCODE] : -1;
    bool atomicOp = op == OP_ATOMIC_CMP_AND_SWP || op == OP_ATOMIC_FETCH_AND_ADD;
    size_t operandWords = atomicOp ? ATOMIC_OPERAND_WORDS : 0;
    if (numSge > q.maxSendSge || p + SEND_WR_HEADER_WORDS + SGE_WORDS * static_cast<size_t>(numSge) + operandWords > words ||
        !(op >= 0 && op <= static_cast<double>(OP_LAST)) || op != static_cast<double>(static_cast<uint8_t>(op)) ||
        (atomicOp && (numSge != 1 || wrs[p + SEND_WR_HEADER_WORDS + SGE_LENGTH] != ATOMIC_BYTES))) {
      rc = {static_cast<uint32_t>(i), POST_EINVAL};  // an atomic takes exactly one 8-byte SGE
      break;
    }
    uint32_t idx = static_cast<uint32_t>(q.sqTail % q.maxSendWr);
    SendEntry& e = q.sq[idx];
    e.wrId = to_u64(wrs[p + SEND_WR_ID]);
    e.opcode = static_cast<uint8_t>(op);
    uint32_t flags = to_u32(wrs[p + SEND_WR_FLAGS]);
    e.signaled = (flags & FLAG_SIGNALED) != 0;
    e.isInline = (flags & FLAG_INLINE) != 0 && e.opcode != OP_RDMA_READ && !atomicOp;
    e.solicited = (flags & FLAG_SOLICITED) != 0;
    e.imm = to_u32(wrs[p + SEND_WR_IMM]);
    e.remoteAddr = to_u64(wrs[p + SEND_WR_REMOTE_ADDR]);
    e.rkey = to_u32(wrs[p + SEND_WR_RKEY]);
    e.numSge = numSge;
    p += SEND_WR_HEADER_WORDS;
    WireSge* sg = &q.sqSge[static_cast<size_t>(idx) * q.maxSendSge];
    // 64 bits: SGE lengths are up to 2^32 - 1 each, and their sum must not wrap (a
    // wrapped sum once let an inline copy land past the WR's inline slot).
    uint64_t total = 0;
    bool badInline = false;
    for (uint32_t k = 0; k < e.numSge; k++, p += SGE_WORDS) {
      sg[k].addr = to_u64(wrs[p + SGE_ADDR]);
      sg[k].length = to_u32(wrs[p + SGE_LENGTH]);
      sg[k].lkey = to_u32(wrs[p + SGE_LKEY]);
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
    if (atomicOp) {
      // Raw 64-bit words (JS writes them through a BigUint64Array view of this buffer).
      std::memcpy(e.operands, &wrs[p], sizeof e.operands);
      p += ATOMIC_OPERAND_WORDS;
    }
    if (badInline) {
      rc = {static_cast<uint32_t>(i), POST_BAD_INLINE};
      break;
    }
    if (e.isInline && total > q.maxInline) {
      rc = {static_cast<uint32_t>(i), POST_EINVAL};
      break;
    }
    e.inlineLen = static_cast<uint32_t>(total);
    e.seq = q.sqTail;
    e.idx = idx;
    e.done = 0;
    e.rnrLeft = q.rnrRetry == 7 ? -1 : static_cast<int32_t>(q.rnrRetry);
    // Only rnr_retry 7 means forever (IB spec); retry_cnt 7 is seven retries, as on real
    // NICs (rxe alone treats it as infinite). timeout 0 is the spec's infinite timer.
    e.retryLeft = q.timeout == 0 ? -1 : static_cast<int32_t>(std::max<uint32_t>(q.retryCount, 1));
    e.readyAt = 0;
    e.placed = 0;
    q.sqTail++;
  }
  if (st == QPS_ERR) {
    flushQp(q);  // posting in ERR succeeds and flushes at once, as on real devices
  } else if (q.blockedUntil == 0) {
    copyTurnUntil_ = now_ms() + kCopyTurnMs;  // the post's share of this turn for a large copy
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

double Device::progressDue(bool turn) {
  if (!blockedCount_) return 0;
  double now = now_ms();
  if (now < nextDeadline_) return nextDeadline_;  // nothing due: skip the scan
  // One share of this turn for all large copies due. A poll between turns (a spin: a
  // waitForCompletion's, or the application's own) gets a fresh share only once one share's
  // length has passed since the last ended, else a piece per QP: a spin polls thousands of
  // times, and a share per poll held the loop for tens of ms of a 1 GiB copy.
  if (turn || now >= copyTurnUntil_ + kCopyTurnMs) copyTurnUntil_ = now + kCopyTurnMs;
  double next = 0;
  for (auto& [h, qp] : qps_) {
    Qp& q = *qp;
    if (q.blockedUntil > 0 && q.blockedUntil <= now) {
      unblock(q);
      if (q.link && q.linkOnWire()) {
        // No answer and no bytes moved in time: a retry spent, as for a lost packet. The
        // frames stay where they are: TCP delivers them or the connection fails (then JS
        // answers TRANSPORT and they go out again); resending on a live one would only queue
        // copies. Out of retries: RETRY_EXC_ERR.
        SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
        settle(q, e, TRANSPORT, WC_SUCCESS, 0, q.linkRnrTimer);
      } else {
        progress(q);
      }
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
    if (q.linkReady || q.linkOnWire()) return;  // the head WR waits for JS or is on the wire
    SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
    if (e.opcode == OP_RDMA_READ && readRun(q) > 0) continue;
    uint8_t status = WC_SUCCESS;
    uint32_t len = 0;
    Outcome o = execute(q, e, &status, &len);
    if (o == LINK) {
      q.linkReady = true;
      linkAttention_ = true;
      // JS takes it from the doorbell, or right after the post or answer it is inside.
      if (!jsTakesLink) ringSelf();
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
  } else if (o == PARTIAL) {
    block(q, now_ms());  // due at once: the next step runs on the next turn of the loop, after its I/O
    return false;
  }
  // A WR that never went on the wire (shared memory, or failed before the link took it)
  // keeps linkSent at the head: [sqHead, linkSent) stays exactly what is on the wire.
  bool sent = q.linkOnWire();
  q.sqHead++;
  if (!sent) q.linkSent = q.sqHead;
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
  c.sqSeq = send_token(e.seq);
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
  if (!t->hasSrq)
    flushRecvQueue(p->base(), reinterpret_cast<RecvQueue*>(p->base() + t->rqOff), t->recvCqOff, t->qpn, p);
  // The owner flushes on its doorbell only if the QP is still in this failed incarnation.
  t->remoteError.store(failed, std::memory_order_release);
  flag_attention(p->base());
  ringPeer(p);
}

Device::Outcome Device::atomic(PeerSegment* p, QpShared* t, uint32_t word, uint8_t opcode, iovec* local, size_t nl,
                               uint64_t remoteAddr, uint32_t rkey, MrPins& pins, const uint64_t* operands,
                               uint8_t* status) {
  // As rxe's responder: atomics the QP does not grant, or on an address that is not 8-byte
  // aligned, are invalid requests; a key, range or MR access failure is an access error.
  // Each fails the target QP too.
  uint64_t length = 0;
  for (size_t k = 0; k < nl; k++) length += local[k].iov_len;
  if ((t->access.load() & ACC_REMOTE_ATOMIC) == 0 || (remoteAddr & (ATOMIC_BYTES - 1)) != 0 ||
      length != ATOMIC_BYTES) {
    *status = WC_REM_INV_REQ_ERR;
    remoteFail(p, t, word);
    return DONE;
  }
  MrView v{};
  if (pins.check(rkey, remoteAddr, ATOMIC_BYTES, ACC_REMOTE_ATOMIC, &v)) {
    if (responderGone(t)) return TRANSPORT;
    *status = WC_REM_ACCESS_ERR;
    remoteFail(p, t, word);
    return DONE;
  }
  // Only memory both processes map can be changed atomically: a regMr buffer of another
  // process (reached by process_vm_writev) cannot, and the operation fails remotely.
  auto* target = static_cast<uint64_t*>(direct(p, v, remoteAddr));
  if (!target) {
    *status = WC_REM_OP_ERR;
    remoteFail(p, t, word);
    return DONE;
  }
  uint64_t prior = operands[0];
  if (opcode == OP_ATOMIC_CMP_AND_SWP) {
    // On failure `prior` becomes the value found; on success it already is.
    __atomic_compare_exchange_n(target, &prior, operands[1], false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  } else {
    prior = __atomic_fetch_add(target, operands[0], __ATOMIC_SEQ_CST);
  }
  iovec result{&prior, ATOMIC_BYTES};
  scatter_copy(local, nl, &result, 1);
  return DONE;
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
  uint32_t idx = e.idx;
  if (e.isInline) {
    local[0] = iovec{&q.sqInline[static_cast<size_t>(idx) * q.maxInline], e.inlineLen};
    *nl = e.inlineLen ? 1 : 0;
    *total = e.inlineLen;
  } else {
    const WireSge* sg = &q.sqSge[static_cast<size_t>(idx) * q.maxSendSge];
    // READ and the atomics write into their local SGEs.
    uint32_t need = e.opcode == OP_RDMA_READ || is_atomic(e.opcode) ? static_cast<uint32_t>(ACC_LOCAL_WRITE) : 0u;
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
  bool rdma = e.opcode == OP_RDMA_WRITE || e.opcode == OP_RDMA_WRITE_WITH_IMM || e.opcode == OP_RDMA_READ;
  if (rdma && total > kCopyStep) return step(q, e, p, t, local, nl, total, status);
  return deliver(p, t, q.peerGen, e.opcode, local, nl, total, e.imm, e.remoteAddr, e.rkey, self->qpn,
                 static_cast<uint32_t>(pid_), status, e.operands, 0, false, e.solicited != 0);
}

// A run's READs land at random places of the peer's region (one row, one meta word each):
// each copy would wait for its source's cache misses alone. Asking for the source lines of a
// READ a few places ahead lets those misses overlap (the copy is then mostly a cache hit).
// Only a hint: nothing is read, and only lines inside the pinned region are named. Client CPU
// per one-sided fetch key (apps/bench scripts/slotcache-micro.mjs, 3 pairs interleaved):
// 0.67–0.70 µs → 0.61–0.64 µs; 12 ahead measured the same as 6.
void Device::prefetchAhead(const Qp& q, uint32_t rkey, const MrView& v, const uint8_t* base) const {
  constexpr uint32_t kAhead = 6;          // READs ahead of the one being copied
  constexpr uint64_t kMaxLines = 8;       // lines of its source named (512 B)
  if (q.sqTail - q.sqHead <= kAhead) return;
  const SendEntry& e = q.sq[(q.sqHead + kAhead) % q.maxSendWr];
  if (e.opcode != OP_RDMA_READ || e.rkey != rkey) return;
  const WireSge& sg = q.sqSge[static_cast<size_t>(e.idx) * q.maxSendSge];
  const uint64_t a = e.remoteAddr, n = std::min<uint64_t>(e.numSge == 1 ? sg.length : 64, kMaxLines * 64);
  if (n == 0 || a < v.addr || a + n < a || a + n > v.addr + v.length) return;
  const uint8_t* from = base + (a - v.addr);
  for (uint64_t off = 0; off < n; off += 64) __builtin_prefetch(from + off, 0, 3);
  __builtin_prefetch(from + n - 1, 0, 3);  // the last line, when the start is not line-aligned
}

uint32_t Device::readRun(Qp& q) {
  // Runs are for the plain shared-memory path: no link, no injected delay or pause.
  if (q.link || q.delayMs > 0 || q.pauseMs > 0) return 0;
  QpShared* self = qpShared(q.slot);
  PeerSegment* p = q.peer.get();
  if (!p || self->linkBroken.load(std::memory_order_relaxed) || q.peerSlot >= p->layout().qpSlots) return 0;
  QpShared* t = reinterpret_cast<QpShared*>(p->base() + p->layout().qpTableOff) + q.peerSlot;
  if (t->linkBroken.load(std::memory_order_relaxed) || t->gen.load(std::memory_order_acquire) != q.peerGen ||
      !p->alive())
    return 0;
  const uint32_t srcQpn = self->qpn, srcPid = static_cast<uint32_t>(pid_);
  QpPin held(t);
  uint32_t word = 0;
  if (!acceptsFrom(t, q.peerGen, srcQpn, srcPid, &word) || (t->access.load() & ACC_REMOTE_READ) == 0) return 0;
  // As deliver() checks for every WR: queues a peer corrupted fail each WR (TRANSPORT), so
  // they end a run before it starts and the generic path reports them.
  if (!sane_queues(p, t)) return 0;
  // The key and region of the head WR, pinned for the run (each WR's range is checked
  // against this view; the owner's deregistration waits for the pin, as for one READ).
  const SendEntry& head = q.sq[q.sqHead % q.maxSendWr];
  const uint32_t rkey = head.rkey;
  MrPins pins(p->base(), p->layout());
  MrView v{};
  if (pins.check(rkey, head.remoteAddr, 1, ACC_REMOTE_READ, &v) != 0) return 0;
  MrEntry& m = mr_table(p->base(), p->layout())[v.slot];
  // This process's view of the region (null: not mapped here; the generic path copies).
  auto* base = v.length ? static_cast<uint8_t*>(direct(p, v, v.addr)) : nullptr;
  if (!base) return 0;
  // Bounded: a run holds its pins for at most this many WRs and bytes.
  constexpr uint32_t kRunMax = 1024;
  uint64_t bytes = 0;
  uint32_t done = 0;
  uint32_t lkey = 0;  // 0: none cached (0 is never a key)
  MrView lv{};
  while (q.sqHead != q.sqTail && done < kRunMax && bytes < kCopyStep * 4) {
    if (state_code(self->state.load(std::memory_order_acquire)) == QPS_ERR) break;
    SendEntry& e = q.sq[q.sqHead % q.maxSendWr];
    if (e.opcode != OP_RDMA_READ || e.rkey != rkey) break;
    // The peer's state and key again (plain loads): a QP moved or a key revoked since ends
    // the run, and the generic path reports it. So does a peer that died: its memory stays
    // mapped here, but execute() checks alive() per WR and retries into RETRY_EXC_ERR.
    if (t->gen.load(std::memory_order_acquire) != q.peerGen || t->state.load(std::memory_order_acquire) != word ||
        m.key.load(std::memory_order_acquire) != rkey || t->linkBroken.load(std::memory_order_relaxed) ||
        self->linkBroken.load(std::memory_order_relaxed) || !p->aliveHot())
      break;
    iovec local[kMaxIov];
    size_t nl = 0;
    uint64_t total = 0;
    const WireSge& sg = q.sqSge[static_cast<size_t>(e.idx) * q.maxSendSge];
    if (e.numSge == 1 && sg.length > 0 && sg.lkey == lkey && sg.addr >= lv.addr && sg.addr + sg.length >= sg.addr &&
        sg.addr + sg.length <= lv.addr + lv.length) {
      // The local region of the last WR, checked then (key, LOCAL_WRITE): only the range
      // is new. Local regions change only on this thread, never during a post.
      local[0] = iovec{reinterpret_cast<void*>(sg.addr), sg.length};
      nl = 1;
      total = sg.length;
    } else {
      uint8_t status = WC_SUCCESS;
      if (!gatherLocal(q, e, local, &nl, &total, &status)) break;
      if (e.numSge == 1 && check_mr(seg_.base(), seg_.layout(), sg.lkey, sg.addr, sg.length, ACC_LOCAL_WRITE, &lv) == 0)
        lkey = sg.lkey;
    }
    if (total == 0 || total > kCopyStep) break;
    const uint64_t a = e.remoteAddr;
    if (a < v.addr || a + total < a || a + total > v.addr + v.length) break;
    prefetchAhead(q, rkey, v, base);
    iovec remote{base + (a - v.addr), total};
    scatter_copy(local, nl, &remote, 1);
    bytes += total;
    done++;
    if (!settle(q, e, DONE, WC_SUCCESS, static_cast<uint32_t>(total), 0)) break;
  }
  return done;
}

Device::Outcome Device::step(Qp& q, SendEntry& e, PeerSegment* p, QpShared* t, iovec* local, size_t nl,
                             uint64_t total, uint8_t* status) {
  const uint32_t self = qpShared(q.slot)->qpn, pid = static_cast<uint32_t>(pid_);
  const bool read = e.opcode == OP_RDMA_READ;
  const uint32_t need = read ? ACC_REMOTE_READ : ACC_REMOTE_WRITE;
  // The whole range, before any byte moves (out of bounds, even in part: nothing is
  // written). Unpinned, only to decide: when it fails, the operation goes to deliver() in
  // one piece, which checks again under pins and reports exactly as for a small one.
  if ((t->access.load() & need) != need || check_mr(p->base(), p->layout(), e.rkey, e.remoteAddr, total, need) != 0)
    return deliver(p, t, q.peerGen, e.opcode, local, nl, total, e.imm, e.remoteAddr, e.rkey, self,
                   pid, status, nullptr, 0, false, e.solicited != 0);
  // Pieces until this turn's share is used, shared by every QP copying (at least one piece
  // each: a post or a turn always moves).
  for (;;) {
    const uint64_t off = e.placed, n = std::min(kCopyStep, total - off);
    const bool last = off + n == total;
    // This piece's slice of the local list.
    iovec part[kMaxIov];
    size_t np = 0;
    uint64_t pos = 0;
    for (size_t k = 0; k < nl && pos < off + n; k++) {
      uint64_t lo = pos, hi = pos + local[k].iov_len;
      pos = hi;
      if (hi <= off) continue;
      uint64_t from = std::max(lo, off), to = std::min(hi, off + n);
      part[np++] = iovec{static_cast<char*>(local[k].iov_base) + (from - lo), static_cast<size_t>(to - from)};
    }
    // Only the last piece is the operation itself (a WITH_IMM takes its receive there, and
    // its completion reports the whole length); the others are plain writes or reads.
    uint8_t op = last ? e.opcode : (read ? OP_RDMA_READ : OP_RDMA_WRITE);
    Outcome o = deliver(p, t, q.peerGen, op, part, np, n, e.imm, e.remoteAddr + off, e.rkey, self, pid, status,
                        nullptr, total, false, e.solicited != 0);
    if (o != DONE || *status != WC_SUCCESS || last) return o;
    e.placed = off + n;
    if (now_ms() >= copyTurnUntil_) return PARTIAL;
  }
}

bool Device::acceptsFrom(QpShared* t, uint32_t gen, uint32_t srcQpn, uint32_t srcPid, uint32_t* word) {
  if (t->gen.load(std::memory_order_seq_cst) != gen) return false;  // destroyed under us
  *word = t->state.load(std::memory_order_seq_cst);
  uint32_t tst = state_code(*word);
  if (tst != QPS_RTR && tst != QPS_RTS) return false;
  // The target listens only to the QP it was connected to; anything else is dropped.
  return t->peerQpn == srcQpn && t->peerPid == srcPid;
}

uint8_t Device::checkRemote(QpShared* t, MrPins& pins, uint32_t need, uint32_t rkey, uint64_t addr, uint64_t len,
                            MrView* view) {
  if (len == 0) return WC_SUCCESS;  // a zero-length RDMA operation touches nothing and checks no key
  if ((t->access.load() & need) != need) return WC_REM_INV_REQ_ERR;
  return pins.check(rkey, addr, len, need, view) ? WC_REM_ACCESS_ERR : WC_SUCCESS;
}

Device::Outcome Device::deliver(PeerSegment* p, QpShared* t, uint32_t gen, uint8_t opcode, iovec* local, size_t nl,
                                uint64_t total, uint32_t imm, uint64_t remoteAddr, uint32_t rkey, uint32_t srcQpn,
                                uint32_t srcPid, uint8_t* status, const uint64_t* operands, uint64_t msgLen,
                                bool placed, bool solicited) {
  // Only the operations there are: an unknown opcode (a forged frame, a corrupt WR) is an
  // invalid request, never treated as one of them without its checks.
  if (opcode > OP_LAST || (is_atomic(opcode) && !operands)) {
    *status = WC_REM_INV_REQ_ERR;
    return DONE;
  }
  QpPin held(t);
  uint32_t word = 0;
  if (!acceptsFrom(t, gen, srcQpn, srcPid, &word)) return TRANSPORT;
  if (pauseNextDeliverMs_ > 0) {  // fault injection (tests): a slow initiator, mid-operation
    usleep(static_cast<useconds_t>(pauseNextDeliverMs_ * 1000));
    pauseNextDeliverMs_ = 0;
  }
  bool withImm = opcode == OP_SEND_WITH_IMM || opcode == OP_RDMA_WRITE_WITH_IMM;
  bool needRecv = consumes_recv(opcode);
  MrPins pins(p->base(), p->layout());
  MrView rview{};
  if (is_atomic(opcode)) return atomic(p, t, word, opcode, local, nl, remoteAddr, rkey, pins, operands, status);

  if (opcode == OP_RDMA_WRITE || opcode == OP_RDMA_WRITE_WITH_IMM || opcode == OP_RDMA_READ) {
    uint32_t need = opcode == OP_RDMA_READ ? ACC_REMOTE_READ : ACC_REMOTE_WRITE;
    uint8_t bad = checkRemote(t, pins, need, rkey, remoteAddr, total, &rview);
    if (bad != WC_SUCCESS) {
      if (bad == WC_REM_ACCESS_ERR && responderGone(t)) return TRANSPORT;
      *status = bad;
      remoteFail(p, t, word);
      return DONE;
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
    Take got = take_rq(p->base(), r, holder_, &w, rsg, &limitHit, &t->state, word);
    if (got == TAKE_BUSY) return TRANSPORT;  // nothing taken: retried like a lost packet
    if (got == TAKE_EMPTY) return RNR;
    if (limitHit) ringPeer(p);
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
      uint64_t take = room >= total ? 0 : std::min<uint64_t>(rsg[k].length, total - room);
      room += rsg[k].length;
      // As rxe: only the bytes this message writes are checked (key, range, LOCAL_WRITE), so
      // an SGE running past its region, or any SGE a short message leaves untouched, is fine.
      if (!take) continue;
      MrView sv{};
      int bad = pins.check(rsg[k].lkey, rsg[k].addr, take, ACC_LOCAL_WRITE, &sv);
      if (bad && responderGone(t)) return TRANSPORT;
      if (bad) {
        recvStatus = WC_LOC_QP_OP_ERR;  // rxe's status for every receive-side memory error
        break;
      }
      void* d = direct(p, sv, rsg[k].addr);
      if (!d) allDirect = false;
      remote[nr++] = iovec{d ? d : reinterpret_cast<void*>(rsg[k].addr), take};
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
        if (c == COPY_FAULT) recvStatus = WC_LOC_QP_OP_ERR;
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
  } else if (placed) {
    // The TCP link put the payload in place as it arrived (place(), with these checks).
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
    c.byteLen = static_cast<uint32_t>(msgLen ? msgLen : total);  // a stepped WRITE_WITH_IMM: all of it
    c.imm = withImm ? imm : 0;
    c.flags = withImm ? WC_FLAG_WITH_IMM : 0;
    c.solicited = solicited ? 1 : 0;
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

}  // namespace soft

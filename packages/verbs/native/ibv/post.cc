// Posting on the ibverbs device: the JS wire format checked, then decoded into ibv WR
// lists reused across calls, and the post results written to the post record (abi.h) as
// the soft provider writes them.
#include "device.h"

#include "../convert.h"

#include <arpa/inet.h>

namespace rdmajs {

int IbvDevice::WireArg(const Napi::CallbackInfo& info, uint32_t maxSge, bool send, const double** w, int* count) {
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    system_error(info.Env(), kClassName, EINVAL, "work requests must be a Float64Array", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return -1;
  }
  Napi::Float64Array a = info[1].As<Napi::Float64Array>();
  double c = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0;
  *count = c > 0 ? static_cast<int>(std::min(c, 4194304.0)) : 0;
  wanted_ = *count;
  // A send's WRs may begin past the array's start (a SendWrList's record): never past its end.
  double s = send && info[3].IsNumber() ? info[3].As<Napi::Number>().DoubleValue() : 0;
  size_t start = s > 0 ? static_cast<size_t>(std::min(s, static_cast<double>(a.ElementLength()))) : 0;
  *w = a.Data() + start;
  size_t words = a.ElementLength() - start, p = 0, head = send ? SEND_WR_HEADER_WORDS : RECV_WR_HEADER_WORDS;
  for (int i = 0; i < *count; i++) {
    if (p + head > words) return i;
    double n = (*w)[p + (send ? SEND_WR_NUM_SGE : RECV_WR_NUM_SGE)];
    double op = send ? (*w)[p + SEND_WR_OPCODE] : 0;
    bool atomic = op == OP_ATOMIC_CMP_AND_SWP || op == OP_ATOMIC_FETCH_AND_ADD;
    size_t tail = atomic ? ATOMIC_OPERAND_WORDS : 0;
    if (!(n >= 0 && n <= maxSge) || p + head + SGE_WORDS * static_cast<size_t>(n) + tail > words) return i;
    if (send && !(op >= 0 && op <= OP_LAST && op == static_cast<int>(op))) return i;  // never READ in disguise
    // An atomic takes exactly one 8-byte SGE (its prior value): checked as JS does.
    if (atomic && !(n == 1 && (*w)[p + head + SGE_LENGTH] == ATOMIC_BYTES)) return i;
    p += head + SGE_WORDS * static_cast<size_t>(n) + tail;
  }
  return *count;
}

void IbvDevice::DecodeSges(const double* w, uint32_t n, ibv_sge* sg) {
  for (uint32_t k = 0; k < n; k++) {
    // Saturating, as soft decodes: a record rewritten after its checks is never UB here.
    sg[k].addr = to_u64(w[SGE_WORDS * k + SGE_ADDR]);
    sg[k].length = to_u32(w[SGE_WORDS * k + SGE_LENGTH]);
    sg[k].lkey = to_u32(w[SGE_WORDS * k + SGE_LKEY]);
  }
}

ibv_send_wr* IbvDevice::DecodeSend(const double* w, int count, uint32_t maxSge) {
  if (sges_.size() < static_cast<size_t>(count) * maxSge) sges_.resize(static_cast<size_t>(count) * maxSge);
  size_t nextSge = 0;
  static constexpr ibv_wr_opcode kOp[] = {IBV_WR_SEND,      IBV_WR_SEND_WITH_IMM,       IBV_WR_RDMA_WRITE,
                                          IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
                                          IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD};
  static_assert(sizeof kOp / sizeof kOp[0] == OP_LAST + 1, "one ibv opcode per OP_*");
  size_t p = 0;
  for (int i = 0; i < count; i++) {
    ibv_send_wr& wr = sendWrs_[static_cast<size_t>(i)];
    wr = ibv_send_wr{};
    wr.wr_id = to_u64(w[p + SEND_WR_ID]);
    // 0..OP_LAST: checked by WireArg before decoding (to_u32: no UB even if it were not).
    int op = static_cast<int>(std::min<uint32_t>(to_u32(w[p + SEND_WR_OPCODE]), OP_LAST));
    wr.opcode = kOp[op];
    uint32_t flags = to_u32(w[p + SEND_WR_FLAGS]);
    wr.send_flags = ((flags & FLAG_SIGNALED) ? IBV_SEND_SIGNALED : 0) | ((flags & FLAG_INLINE) ? IBV_SEND_INLINE : 0) |
                    ((flags & FLAG_SOLICITED) ? IBV_SEND_SOLICITED : 0);
    wr.imm_data = htonl(to_u32(w[p + SEND_WR_IMM]));
    wr.wr.rdma.remote_addr = to_u64(w[p + SEND_WR_REMOTE_ADDR]);
    wr.wr.rdma.rkey = to_u32(w[p + SEND_WR_RKEY]);
    uint32_t n = std::min(to_u32(w[p + SEND_WR_NUM_SGE]), maxSge);
    ibv_sge* sg = sges_.data() + nextSge;
    nextSge += n;
    DecodeSges(w + p + SEND_WR_HEADER_WORDS, n, sg);
    wr.sg_list = n ? sg : nullptr;
    wr.num_sge = static_cast<int>(n);
    wr.next = i + 1 < count ? &sendWrs_[static_cast<size_t>(i) + 1] : nullptr;
    p += SEND_WR_HEADER_WORDS + SGE_WORDS * n;
    if (op == OP_ATOMIC_CMP_AND_SWP || op == OP_ATOMIC_FETCH_AND_ADD) {
      uint64_t operands[ATOMIC_OPERAND_WORDS];
      std::memcpy(operands, w + p, sizeof operands);  // raw uint64 words, not doubles
      // wr.wr is a union: the atomic member replaces the rdma one set above.
      uint64_t remote = wr.wr.rdma.remote_addr;
      uint32_t rkey = wr.wr.rdma.rkey;
      wr.wr.atomic.remote_addr = remote;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = operands[0];
      wr.wr.atomic.swap = operands[1];
      p += ATOMIC_OPERAND_WORDS;
    }
  }
  return sendWrs_.data();
}

ibv_recv_wr* IbvDevice::DecodeRecv(const double* w, int count, uint32_t maxSge) {
  if (recvWrs_.size() < static_cast<size_t>(count)) recvWrs_.resize(static_cast<size_t>(count));
  if (sges_.size() < static_cast<size_t>(count) * maxSge) sges_.resize(static_cast<size_t>(count) * maxSge);
  size_t p = 0, nextSge = 0;
  for (int i = 0; i < count; i++) {
    ibv_recv_wr& wr = recvWrs_[static_cast<size_t>(i)];
    wr = ibv_recv_wr{};
    wr.wr_id = to_u64(w[p + RECV_WR_ID]);
    uint32_t n = std::min(to_u32(w[p + RECV_WR_NUM_SGE]), maxSge);
    ibv_sge* sg = sges_.data() + nextSge;
    nextSge += n;
    DecodeSges(w + p + RECV_WR_HEADER_WORDS, n, sg);
    wr.sg_list = n ? sg : nullptr;
    wr.num_sge = static_cast<int>(n);
    wr.next = i + 1 < count ? &recvWrs_[static_cast<size_t>(i) + 1] : nullptr;
    p += RECV_WR_HEADER_WORDS + SGE_WORDS * n;
  }
  return recvWrs_.data();
}

bool IbvDevice::Registered(uint64_t addr, uint64_t len) const {
  for (const auto& [h, m] : mrs_) {
    auto base = reinterpret_cast<uint64_t>(m.mr->addr);
    if (addr >= base && addr + len <= base + m.mr->length && addr + len >= addr) return true;
  }
  return false;
}

Napi::Value IbvDevice::PostSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Qp* q = QpAt(info);
  if (!q) return env.Undefined();
  // rxe keeps sends posted before RTS and runs them later; verbs says EINVAL: reject.
  if (q->state != QPS_RTS && q->state != QPS_ERR) return Posted(env, {0, POST_EINVAL});
  const double* w = nullptr;
  int count = 0, bad = WireArg(info, q->maxSendSge, true, &w, &count);
  if (bad < 0) return env.Undefined();
  if (bad < count) count = bad;  // the WRs before a malformed one are posted
  if (count == 0) return Posted(env, {0, wanted_ > 0 ? POST_EINVAL : POST_OK});
  if (sendWrs_.size() < static_cast<size_t>(count)) sendWrs_.resize(static_cast<size_t>(count));
  ibv_send_wr* list = DecodeSend(w, count, q->maxSendSge);
  // The provider copies inline data from these addresses in post_send: an address
  // outside registered memory would crash the process, so such a post is refused.
  int ok = count;  // WRs before the first refused one are posted
  for (int i = 0; i < count && ok == count; i++) {
    const ibv_send_wr& wr = list[i];
    if (!(wr.send_flags & IBV_SEND_INLINE)) continue;
    for (int k = 0; k < wr.num_sge; k++) {
      if (wr.sg_list[k].length && !Registered(wr.sg_list[k].addr, wr.sg_list[k].length)) ok = i;
    }
  }
  if (ok == 0) return Posted(env, {0, POST_BAD_INLINE});
  list[ok - 1].next = nullptr;
  ibv_send_wr* badWr = nullptr;
  int rc = ibv_post_send(q->qp, list, &badWr);
  if (rc == 0 && ok < count) return Posted(env, {static_cast<uint32_t>(ok), POST_BAD_INLINE});
  if (rc == 0 && count < wanted_) return Posted(env, {static_cast<uint32_t>(count), POST_EINVAL});
  return Posted(env, Outcome(rc, list, badWr, ok));
}

Napi::Value IbvDevice::PostRecvList(const Napi::CallbackInfo& info, ibv_qp* qp, ibv_srq* srq, uint32_t maxSge) {
  Napi::Env env = info.Env();
  const double* w = nullptr;
  int count = 0, bad = WireArg(info, maxSge, false, &w, &count);
  if (bad < 0) return env.Undefined();
  if (bad == 0 && count > 0) return Posted(env, {0, POST_EINVAL});
  if (bad < count) count = bad;  // the WRs before a malformed one are posted
  if (count == 0) return Posted(env, {0, POST_OK});
  ibv_recv_wr* list = DecodeRecv(w, count, maxSge);
  ibv_recv_wr* badWr = nullptr;
  int rc = srq ? ibv_post_srq_recv(srq, list, &badWr) : ibv_post_recv(qp, list, &badWr);
  if (rc == 0 && count < wanted_) return Posted(env, {static_cast<uint32_t>(count), POST_EINVAL});
  return Posted(env, Outcome(rc, list, badWr, count));
}

Napi::Value IbvDevice::PostRecv(const Napi::CallbackInfo& info) {
  Qp* q = QpAt(info);
  if (!q) return info.Env().Undefined();
  if (q->state == QPS_RESET) return Posted(info.Env(), {0, POST_EINVAL});
  return PostRecvList(info, q->qp, nullptr, q->maxRecvSge);
}

Napi::Value IbvDevice::PostSrqRecv(const Napi::CallbackInfo& info) {
  if (!Alive(info)) return info.Env().Undefined();
  auto it = info[0].IsNumber() ? srqs_.find(info[0].As<Napi::Number>().Int32Value()) : srqs_.end();
  if (it == srqs_.end())
    return Fail(info, EBADF, "no such shared receive queue on this device", "ERR_RDMA_INVALID_ARG");
  return PostRecvList(info, nullptr, it->second.srq, it->second.maxSge);
}

}  // namespace rdmajs

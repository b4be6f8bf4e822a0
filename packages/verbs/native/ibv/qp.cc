// Queue pairs and shared receive queues of the ibverbs device: creation, state and
// transitions (modify_qp attributes from the endpoint), destruction.
#include "device.h"

#include "../records.h"

#include <arpa/inet.h>

#include <cstring>

namespace rdmajs {

Napi::Value IbvDevice::CreateSrq(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  int h = nextHandle_++;
  ibv_srq_init_attr a{};
  a.srq_context = tag(h);
  a.attr.max_wr = info[0].As<Napi::Number>().Uint32Value();
  a.attr.max_sge = info[1].As<Napi::Number>().Uint32Value();
  ibv_srq* s = api_->create_srq(pd_, &a);
  if (!s) return (system_error(env, "ibv_create_srq", errno).ThrowAsJavaScriptException(), env.Undefined());
  srqs_[h] = Srq{s, a.attr.max_wr, a.attr.max_sge};
  return Napi::Number::New(env, h);
}

Napi::Value IbvDevice::DestroySrq(const Napi::CallbackInfo& info) {
  auto it = srqs_.find(info[0].As<Napi::Number>().Int32Value());
  if (it == srqs_.end() || !ctx_) return info.Env().Undefined();
  if (int rc = api_->destroy_srq(it->second.srq))
    return (system_error(info.Env(), "ibv_destroy_srq", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
  srqs_.erase(it);
  return info.Env().Undefined();
}

Napi::Value IbvDevice::ArmSrqLimit(const Napi::CallbackInfo& info) {
  if (!Alive(info)) return info.Env().Undefined();
  auto it = srqs_.find(info[0].As<Napi::Number>().Int32Value());
  if (it == srqs_.end()) return info.Env().Undefined();
  ibv_srq_attr a{};
  a.srq_limit = info[1].As<Napi::Number>().Uint32Value();
  if (int rc = api_->modify_srq(it->second.srq, &a, IBV_SRQ_LIMIT))
    system_error(info.Env(), "ibv_modify_srq", rc).ThrowAsJavaScriptException();
  return info.Env().Undefined();
}

Napi::Value IbvDevice::CreateQp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  auto num = [&](int i) { return info[static_cast<size_t>(i)].As<Napi::Number>().Int32Value(); };
  auto scq = cqs_.find(num(0)), rcq = cqs_.find(num(1));
  if (scq == cqs_.end() || rcq == cqs_.end())
    return (system_error(env, kClassName, EBADF, "no such completion queue on this device", "ERR_RDMA_INVALID_ARG")
                .ThrowAsJavaScriptException(),
            env.Undefined());
  ibv_srq* srq = nullptr;
  if (num(2) >= 0) {
    auto s = srqs_.find(num(2));
    if (s == srqs_.end())
      return (
          system_error(env, kClassName, EBADF, "no such shared receive queue on this device", "ERR_RDMA_INVALID_ARG")
              .ThrowAsJavaScriptException(),
          env.Undefined());
    srq = s->second.srq;
  }
  int h = nextHandle_++;
  ibv_qp_init_attr a{};
  a.qp_context = tag(h);
  a.send_cq = scq->second.cq;
  a.recv_cq = rcq->second.cq;
  a.srq = srq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = static_cast<uint32_t>(num(3));
  a.cap.max_recv_wr = srq ? 0 : static_cast<uint32_t>(num(4));
  a.cap.max_send_sge = static_cast<uint32_t>(num(5));
  a.cap.max_recv_sge = srq ? 0 : static_cast<uint32_t>(num(6));
  a.cap.max_inline_data = static_cast<uint32_t>(num(7));
  ibv_qp* qp = api_->create_qp(pd_, &a);
  if (!qp) return (system_error(env, "ibv_create_qp", errno).ThrowAsJavaScriptException(), env.Undefined());
  // What the device granted: ibv_create_qp's `cap` may still hold the request (as with rxe,
  // which rounds rings up: asked 4, the ring takes 7), ibv_query_qp reports the real rings.
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  if (int rc = api_->query_qp(qp, &qa, IBV_QP_CAP, &qi)) {
    api_->destroy_qp(qp);
    return (system_error(env, "ibv_query_qp", rc).ThrowAsJavaScriptException(), env.Undefined());
  }
  ibv_qp_cap granted = qa.cap;
  // Never below the request (a provider that leaves a field 0 has granted at least that).
  granted.max_send_wr = std::max(granted.max_send_wr, a.cap.max_send_wr);
  granted.max_recv_wr = srq ? 0 : std::max(granted.max_recv_wr, a.cap.max_recv_wr);
  granted.max_inline_data = std::max(granted.max_inline_data, a.cap.max_inline_data);
  uint32_t psn = psnRng_() & 0xffffff;
  qps_[h] = Qp{qp, psn, QPS_RESET, granted, static_cast<uint32_t>(num(5)), static_cast<uint32_t>(num(6))};
  size_t sge = std::max<size_t>({static_cast<size_t>(num(5)), static_cast<size_t>(num(6)), 1});
  size_t wr = std::max<size_t>({static_cast<size_t>(granted.max_send_wr), static_cast<size_t>(granted.max_recv_wr), 1});
  if (sendWrs_.size() < wr) sendWrs_.resize(wr), recvWrs_.resize(wr);
  if (sges_.size() < wr * sge) sges_.resize(wr * sge);
  return Napi::Number::New(env, h);
}

Napi::Value IbvDevice::DestroyQp(const Napi::CallbackInfo& info) {
  auto it = qps_.find(info[0].As<Napi::Number>().Int32Value());
  if (it == qps_.end() || !ctx_) return info.Env().Undefined();
  int rc = api_->destroy_qp(it->second.qp);
  if (rc) return (system_error(info.Env(), "ibv_destroy_qp", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
  qps_.erase(it);
  return info.Env().Undefined();
}

// qpInfo(h) → { qpn, psn, maxSendWr, maxRecvWr, maxInlineData }: the capacities the
// device granted (often more than asked: rxe rounds rings up).
Napi::Value IbvDevice::QpInfo(const Napi::CallbackInfo& info) {
  Qp* q = QpAt(info);
  if (!q) return info.Env().Undefined();
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("qpn", q->qp->qp_num);
  out.Set("psn", q->psn);
  out.Set("maxSendWr", q->cap.max_send_wr);
  out.Set("maxRecvWr", q->cap.max_recv_wr);
  out.Set("maxInlineData", q->cap.max_inline_data);
  return out;
}

// The device's view (it moves QPs to ERR by itself), not just the last transition.
Napi::Value IbvDevice::QpState(const Napi::CallbackInfo& info) {
  Qp* q = QpAt(info);
  if (!q) return info.Env().Undefined();
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (int rc = api_->query_qp(q->qp, &a, IBV_QP_STATE, &ia))
    return (system_error(info.Env(), "ibv_query_qp", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
  int s = a.qp_state == IBV_QPS_SQE ? QPS_ERR : static_cast<int>(a.qp_state);
  if (s == QPS_ERR) q->state = QPS_ERR;
  return Napi::Number::New(info.Env(), s);
}

// modifyQp(h, state, attr): QPS_INIT { access, port }; QPS_RTR { destQpn, rqPsn, dlid,
// gidWords (4 big-endian words; all zero: no GRH), mtu, minRnrTimer, port, sgidIndex (-1:
// none), hopLimit, sl, trafficClass }; QPS_RTS { timeout, retryCount, rnrRetry, maxRdAtomic
// (the peer's responder resources) }; QPS_ERR and QPS_RESET take none. Returns 0 or errno.
Napi::Value IbvDevice::ModifyQp(const Napi::CallbackInfo& info) {
  Qp* q = QpAt(info);
  if (!q) return info.Env().Undefined();
  Napi::Env env = info.Env();
  int to = info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : -1;
  ibv_qp_attr a{};
  int mask = IBV_QP_STATE;
  switch (to) {
    case QPS_RESET: a.qp_state = IBV_QPS_RESET; break;
    case QPS_INIT: {
      Attr at(info, 2, "modifyQp(init)");
      a.qp_access_flags = static_cast<int>(at.U32("access", 0xffff));
      a.port_num = static_cast<uint8_t>(at.U32("port", 255));
      if (!at.ok()) return env.Undefined();
      a.qp_state = IBV_QPS_INIT;
      a.pkey_index = 0;
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      break;
    }
    case QPS_RTR: {
      Attr at(info, 2, "modifyQp(rtr)");
      a.dest_qp_num = at.U32("destQpn", 0xffffff);
      a.rq_psn = at.U32("rqPsn", 0xffffff);
      a.ah_attr.dlid = static_cast<uint16_t>(at.U32("dlid", 0xffff));
      uint32_t words[4];
      at.Words("gidWords", words, 4);
      auto mtu = static_cast<uint32_t>(at.Int("mtu", IBV_MTU_256, IBV_MTU_4096));
      uint32_t minRnr = at.U32("minRnrTimer", 31);
      int port = static_cast<int>(at.U32("port", 255));
      int sgid = static_cast<int>(at.Int("sgidIndex", -1, 255));
      uint32_t hopLimit = at.U32("hopLimit", 255), sl = at.U32("sl", 15), trafficClass = at.U32("trafficClass", 255);
      if (!at.ok()) return env.Undefined();
      ibv_gid g{};
      for (int w = 0; w < 4; w++) {
        uint32_t be = htonl(words[w]);
        std::memcpy(g.raw + 4 * w, &be, 4);
      }
      bool global = false;
      for (uint8_t b : g.raw) global |= b != 0;
      if (global) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = g;
        a.ah_attr.grh.sgid_index = static_cast<uint8_t>(std::max(sgid, 0));
        a.ah_attr.grh.hop_limit = static_cast<uint8_t>(hopLimit);
        a.ah_attr.grh.traffic_class = static_cast<uint8_t>(trafficClass);
      }
      a.ah_attr.sl = static_cast<uint8_t>(sl);
      a.ah_attr.port_num = static_cast<uint8_t>(port);
      ibv_mtu portMtu = route_.mtu;
      for (const auto& p : view_.ports)
        if (p.port == port) portMtu = p.attr.active_mtu;
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = static_cast<ibv_mtu>(std::min<uint32_t>(mtu, portMtu));
      a.min_rnr_timer = static_cast<uint8_t>(minRnr);
      a.max_dest_rd_atomic = ResponderResources();
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
              IBV_QP_MIN_RNR_TIMER;
      break;
    }
    case QPS_RTS: {
      Attr at(info, 2, "modifyQp(rts)");
      a.timeout = static_cast<uint8_t>(at.U32("timeout", 31));
      a.retry_cnt = static_cast<uint8_t>(at.U32("retryCount", 7));
      a.rnr_retry = static_cast<uint8_t>(at.U32("rnrRetry", 7));
      uint32_t peerRdAtomic = at.U32("maxRdAtomic", 255);
      if (!at.ok()) return env.Undefined();
      a.qp_state = IBV_QPS_RTS;
      a.sq_psn = q->psn;
      // Outstanding READs may not exceed what the peer's responder accepts (its endpoint).
      uint8_t initRdAtom = static_cast<uint8_t>(std::clamp(view_.attr.max_qp_init_rd_atom, 1, 16));
      a.max_rd_atomic = std::min<uint8_t>(initRdAtom, static_cast<uint8_t>(std::max(peerRdAtomic, 1u)));
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
      break;
    }
    default:
      a.qp_state = IBV_QPS_ERR;
      to = QPS_ERR;
      break;
  }
  int rc = api_->modify_qp(q->qp, &a, mask);
  if (rc == 0) q->state = to;
  return Napi::Number::New(env, rc);
}

}  // namespace rdmajs

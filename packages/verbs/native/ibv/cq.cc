// Completion queues of the ibverbs device: polling into the JS record layout, and a staging
// area so completions can be counted (verbs cannot peek) before they are handed out.
#include "device.h"

#include <arpa/inet.h>

namespace rdmajs {

Napi::Value IbvDevice::CreateCq(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  int capacity = info[0].As<Napi::Number>().Int32Value();
  int h = nextHandle_++;
  ibv_cq* cq = api_->create_cq(ctx_, capacity, tag(h), channel_, 0);
  if (!cq) return (system_error(env, "ibv_create_cq", errno).ThrowAsJavaScriptException(), env.Undefined());
  Cq& c = cqs_[h];
  c.cq = cq;
  c.staged.reserve(static_cast<size_t>(cq->cqe));
  return Napi::Number::New(env, h);
}

Napi::Value IbvDevice::DestroyCq(const Napi::CallbackInfo& info) {
  auto it = cqs_.find(info[0].As<Napi::Number>().Int32Value());
  if (it == cqs_.end() || !ctx_) return info.Env().Undefined();
  if (it->second.unacked) api_->ack_cq_events(it->second.cq, it->second.unacked);
  it->second.unacked = 0;  // acking twice would make destroy_cq wait forever
  int rc = api_->destroy_cq(it->second.cq);
  if (rc) return (system_error(info.Env(), "ibv_destroy_cq", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
  cqs_.erase(it);
  return info.Env().Undefined();
}

void IbvDevice::Encode(const ibv_wc& wc, double* r) {
  r[0] = static_cast<double>(wc.wr_id);
  r[1] = wc.status;
  r[2] = wc.status == IBV_WC_SUCCESS ? wc.opcode : 0;
  r[3] = wc.byte_len;
  r[4] = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
  r[5] = wc.qp_num;
  r[6] = static_cast<double>(wc.wc_flags & 0xff) + static_cast<double>(wc.vendor_err) * 256.0;
  r[7] = wc.src_qp;
}

Napi::Value IbvDevice::PollCq(const Napi::CallbackInfo& info) {
  Cq* c = CqAt(info);
  if (!c) return info.Env().Undefined();
  Napi::Float64Array out = info[1].As<Napi::Float64Array>();
  int max = std::max(0, std::min(info[2].As<Napi::Number>().Int32Value(), static_cast<int>(out.ElementLength() / 8)));
  double* r = out.Data();
  int n = 0;
  while (n < max && c->head < c->staged.size()) Encode(c->staged[c->head++], r + 8 * n++);
  if (c->head == c->staged.size()) {
    c->staged.clear();
    c->head = 0;
  }
  if (n < max) {
    if (scratch_.size() < static_cast<size_t>(max)) scratch_.resize(static_cast<size_t>(max));
    int got = ibv_poll_cq(c->cq, max - n, scratch_.data());
    for (int i = 0; i < got; i++) Encode(scratch_[static_cast<size_t>(i)], r + 8 * n++);
  }
  // armIfEmpty asked: ibverbs does not arm in a poll, so none taken says "not armed".
  bool armAsked = info.Length() > 3 && info[3].IsNumber() && info[3].As<Napi::Number>().DoubleValue() == 1;
  if (n == 0 && armAsked) return Napi::Number::New(info.Env(), abi::POLL_NOT_ARMED);
  return Napi::Number::New(info.Env(), n);
}

size_t IbvDevice::Stage(Cq* c) {
  if (c->head > 0) {  // drop what was handed out: the area never outgrows the CQ
    c->staged.erase(c->staged.begin(), c->staged.begin() + static_cast<std::ptrdiff_t>(c->head));
    c->head = 0;
  }
  for (;;) {
    size_t room = static_cast<size_t>(c->cq->cqe) + 1 - (c->staged.size() - c->head);
    if (room == 0) break;
    if (scratch_.size() < room) scratch_.resize(room);
    int got = ibv_poll_cq(c->cq, static_cast<int>(room), scratch_.data());
    if (got <= 0) break;
    c->staged.insert(c->staged.end(), scratch_.begin(), scratch_.begin() + got);
  }
  return c->staged.size() - c->head;
}

// Arms the channel (argument 1 non-zero: solicited_only, the next solicited or failed
// completion), then counts: a completion that arrived before the arm is reported here
// instead of being waited for.
Napi::Value IbvDevice::ArmCq(const Napi::CallbackInfo& info) {
  Cq* c = CqAt(info);
  if (!c) return info.Env().Undefined();
  int solicitedOnly = info.Length() > 1 && info[1].IsNumber() && info[1].As<Napi::Number>().DoubleValue() != 0;
  if (int rc = ibv_req_notify_cq(c->cq, solicitedOnly))
    return (system_error(info.Env(), "ibv_req_notify_cq", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
  return Napi::Number::New(info.Env(), static_cast<double>(Stage(c)));
}

Napi::Value IbvDevice::CqCapacity(const Napi::CallbackInfo& info) {
  Cq* c = CqAt(info);
  return c ? Napi::Number::New(info.Env(), c->cq->cqe) : info.Env().Undefined();
}

Napi::Value IbvDevice::CqCount(const Napi::CallbackInfo& info) {
  Cq* c = CqAt(info);
  return c ? Napi::Number::New(info.Env(), static_cast<double>(Stage(c))) : info.Env().Undefined();
}

}  // namespace rdmajs

// The soft device's TCP link (the sockets live in JS; these move WRs and answers across)
// and its fault injection.
#include "records.h"
#include "soft_device.h"

namespace rdmajs {

Napi::Value SoftDevice::Inject(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  namespace abi = rdmajs::abi;
  uint32_t kind = U32(info, 1);
  double v = Num(info, 2);
  switch (kind) {
    case abi::FAULT_BREAK_LINK:
      dev_->injectBreakLink(h);
      break;
    case abi::FAULT_STALL_RECEIVER:
      dev_->injectStall(h, v != 0);
      break;
    case abi::FAULT_DELAY:
      dev_->injectDelay(h, std::isfinite(v) && v > 0 ? v : 0);
      break;
    case abi::FAULT_HOLD_PEER_LOCK:
      dev_->injectHoldPeerLock(h);
      break;
    case abi::FAULT_PIN_PEER:
    case abi::FAULT_UNPIN_PEER:
      dev_->injectPeerPin(h, soft::to_u32(v), kind == abi::FAULT_PIN_PEER);
      break;
    case abi::FAULT_PAUSE_IN_DELIVER:
      dev_->injectPauseInDeliver(h, std::isfinite(v) && v > 0 ? std::min(v, 10000.0) : 0);
      break;
    default:
      Fail(info, EINVAL, "no such fault kind: " + std::to_string(kind), "ERR_RDMA_INVALID_ARG");
  }
  return info.Env().Undefined();
}

Napi::Value SoftDevice::ToRtrLink(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  Attr a(info, 1, "toRtrLink");
  uint32_t pid = a.U32("pid", 0x400000);
  uint32_t slot = a.U32("slot");
  uint32_t gen = a.U32("gen");
  uint32_t qpn = a.U32("qpn", 0xffffff);
  uint32_t minRnr = a.U32("minRnrTimer", 31);
  if (!a.ok()) return info.Env().Undefined();
  return Napi::Number::New(info.Env(), dev_->toRtrLink(h, pid, slot, gen, qpn, minRnr));
}

Napi::Value SoftDevice::LinkTake(const Napi::CallbackInfo& info) {
  int h;
  ArrayView hdr;
  ArrayView payload;
  if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &hdr) ||
      !ArrayArg(info, 2, napi_uint8_array, &payload))
    return info.Env().Undefined();
  if (hdr.length < static_cast<size_t>(rdmajs::abi::LINK_WORDS)) {
    Fail(info, EINVAL, "linkTake: the header record is shorter than LINK_WORDS", "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  int r = dev_->linkTake(h, hdr.f64(), payload.u8(), payload.bytes);
  Schedule();
  return Napi::Number::New(info.Env(), r);
}

Napi::Value SoftDevice::LinkDone(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  const uint8_t* data = nullptr;
  size_t len = 0;
  if (info[5].IsTypedArray()) {
    ArrayView d;
    if (!ArrayArg(info, 5, napi_uint8_array, &d)) return info.Env().Undefined();
    data = d.u8();
    len = d.bytes;
  }
  auto u = [&](size_t i) { return U32(info, i); };
  dev_->linkDone(h, u(1), static_cast<int>(std::min<uint32_t>(u(2), 255)),
                 static_cast<uint8_t>(std::min<uint32_t>(u(3), 255)), std::min<uint32_t>(u(4), 31), data, len);
  Schedule();
  return info.Env().Undefined();
}

Napi::Value SoftDevice::LinkProgress(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  dev_->linkProgress(h);
  Schedule();
  return info.Env().Undefined();
}

Napi::Value SoftDevice::Respond(const Napi::CallbackInfo& info) {
  namespace abi = rdmajs::abi;
  if (!Alive(info)) return info.Env().Undefined();
  ArrayView rec;
  ArrayView payload;
  if (!ArrayArg(info, 0, napi_float64_array, &rec) || !ArrayArg(info, 1, napi_uint8_array, &payload))
    return info.Env().Undefined();
  if (rec.length < static_cast<size_t>(abi::RESPOND_WORDS)) {
    Fail(info, EINVAL, "respond: the record is shorter than RESPOND_WORDS", "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  double* r = rec.f64();
  auto u = [&](int i) { return soft::to_u32(r[i]); };
  soft::Answer a = dev_->respond(u(abi::RESPOND_SLOT), u(abi::RESPOND_GEN),
                                 static_cast<uint8_t>(std::min<uint32_t>(u(abi::RESPOND_OPCODE), 255)), payload.u8(),
                                 payload.bytes, u(abi::RESPOND_IMM), soft::to_u64(r[abi::RESPOND_REMOTE_ADDR]),
                                 u(abi::RESPOND_RKEY), u(abi::RESPOND_SRC_QPN), u(abi::RESPOND_SRC_PID));
  r[abi::RESPOND_OUTCOME] = a.outcome;
  r[abi::RESPOND_STATUS] = a.status;
  r[abi::RESPOND_RNR_TIMER] = a.rnrTimer & 31;
  return Napi::Number::New(info.Env(), a.outcome);
}

}  // namespace rdmajs

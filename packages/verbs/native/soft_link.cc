// The soft device's TCP link (the sockets live in JS; these move WRs and answers across)
// and its fault injection.
#include "soft_device.h"

namespace rdmajs {

Napi::Value SoftDevice::Inject(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  uint32_t kind = U32(info, 1);
  double v = Num(info, 2);
  if (kind == 0) dev_->injectBreakLink(h);
  if (kind == 1) dev_->injectStall(h, v != 0);
  if (kind == 2) dev_->injectDelay(h, std::isfinite(v) && v > 0 ? v : 0);
  if (kind == 3) dev_->injectHoldPeerLock(h);
  if (kind == 4 || kind == 5) dev_->injectPeerPin(h, soft::to_u32(v), kind == 4);
  if (kind == 6) dev_->injectPauseInDeliver(h, std::isfinite(v) && v > 0 ? std::min(v, 10000.0) : 0);
  return info.Env().Undefined();
}

Napi::Value SoftDevice::ToRtrLink(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  auto u = [&](size_t i) { return U32(info, i); };
  return Napi::Number::New(info.Env(), dev_->toRtrLink(h, u(1), u(2), u(3), u(4), std::min<uint32_t>(u(5), 31)));
}

Napi::Value SoftDevice::LinkTake(const Napi::CallbackInfo& info) {
  int h;
  ArrayView hdr;
  ArrayView payload;
  if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &hdr) ||
      !ArrayArg(info, 2, napi_uint8_array, &payload))
    return info.Env().Undefined();
  if (hdr.length < static_cast<size_t>(rdmajs::abi::LINK_WORDS)) return Napi::Number::New(info.Env(), 0);
  double r = dev_->linkTake(h, hdr.f64(), payload.u8(), payload.bytes);
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
  if (!Alive(info)) return info.Env().Undefined();
  ArrayView payload;
  if (!ArrayArg(info, 3, napi_uint8_array, &payload)) return info.Env().Undefined();
  auto u = [&](size_t i) { return U32(info, i); };
  uint32_t rnr = 12;
  int r = dev_->respond(u(0), u(1), static_cast<uint8_t>(std::min<uint32_t>(u(2), 255)), payload.u8(), payload.bytes,
                        u(4), soft::to_u64(Num(info, 5)), u(6), u(7), u(8), &rnr);
  return Napi::Number::New(info.Env(), static_cast<double>(((rnr & 31) << 16) | static_cast<uint32_t>(r)));
}

}  // namespace rdmajs

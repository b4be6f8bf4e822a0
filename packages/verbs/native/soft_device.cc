// The soft provider's device object: opening, events (the segment's doorbell and the retry
// timer), close and teardown, and what an endpoint of it carries.
#include "soft_device.h"

#include <unistd.h>

namespace rdmajs {

SoftDevice::SoftDevice(const Napi::CallbackInfo& info) : DeviceWrap(info) {
  Napi::Env env = info.Env();
  static constexpr const char* kUsage =
      "new SoftDevice(onEvent, ready, post) takes a function, a Uint32Array(CQ_READY_BATCH) and a "
      "Uint32Array(POST_RECORD_WORDS)";
  if (!info[0].IsFunction() || !info[1].IsTypedArray() ||
      info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array ||
      info[1].As<Napi::TypedArray>().ElementLength() != static_cast<size_t>(abi::CQ_READY_BATCH)) {
    system_error(env, kClassName, EINVAL, kUsage, "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException();
    return;
  }
  if (!AdoptPostRecord(info, 2, kUsage)) return;
  onEvent_ = Napi::Persistent(info[0].As<Napi::Function>());
  readyOut_ = Napi::Persistent(info[1].As<Napi::Uint32Array>());
  try {
    dev_ = std::make_unique<soft::Device>();
  } catch (const soft::SysError& e) {
    system_error(env, e.syscall, e.err).ThrowAsJavaScriptException();
    return;
  }
  Attach(env, "rdmajs:soft-device");
  uv_loop_t* loop = Loop(env);
  poll_ = StartPoll(loop, dev_->segment().eventfd(), &SoftDevice::OnReadable);
  timer_ = StartTimer(loop);
  step_ = new uv_idle_t;
  step_->data = this;
  uv_idle_init(loop, step_);
  uv_unref(reinterpret_cast<uv_handle_t*>(step_));
  prepare_ = new uv_prepare_t;
  prepare_->data = this;
  uv_prepare_init(loop, prepare_);
  flushCheck_ = new uv_check_t;
  flushCheck_->data = this;
  uv_check_init(loop, flushCheck_);
  uv_unref(reinterpret_cast<uv_handle_t*>(flushCheck_));
  flushIdle_ = new uv_idle_t;
  flushIdle_->data = this;
  uv_idle_init(loop, flushIdle_);
  uv_unref(reinterpret_cast<uv_handle_t*>(flushIdle_));
}

void SoftDevice::OnFlush(uv_check_t* h) {
  auto* self = static_cast<SoftDevice*>(h->data);
  uv_check_stop(self->flushCheck_);
  uv_idle_stop(self->flushIdle_);
  self->flushArmed_ = false;
  if (!self->dev_) return;
  if (self->doorbellOwed_) {
    self->doorbellOwed_ = false;
    self->RunDoorbell();
  }
  if (self->linkFlushOwed_ && self->dev_ && !self->linkFlush_.IsEmpty()) {
    self->linkFlushOwed_ = false;
    Napi::HandleScope scope(self->Env());
    RingHold hold(self, true);
    self->CallBack(self->linkFlush_);
  }
}

Napi::Value SoftDevice::OnLinkFlush(const Napi::CallbackInfo& info) {
  if (!Alive(info)) return info.Env().Undefined();
  if (!info[0].IsFunction()) return Fail(info, EINVAL, "onLinkFlush takes a function", "ERR_RDMA_INVALID_ARG");
  linkFlush_ = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

Napi::Value SoftDevice::LinkFlushSoon(const Napi::CallbackInfo& info) {
  if (!Alive(info)) return info.Env().Undefined();
  if (info.Length() > 0 && info[0].IsBoolean() && !info[0].As<Napi::Boolean>().Value()) {
    // Written already (with a request): no call into JS for nothing. A doorbell owed stays.
    linkFlushOwed_ = false;
    return info.Env().Undefined();
  }
  linkFlushOwed_ = true;
  ArmFlush();
  return info.Env().Undefined();
}

Napi::Value SoftDevice::WakeOwed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if ((!doorbellOwed_ && !takenKept_) || !dev_) return Napi::Number::New(env, 0);
  doorbellOwed_ = false;
  TakeDoorbell();  // after what TakeReadyNow kept, if anything
  {
    // Async events (rare) go through the handler as from the doorbell.
    RingHold hold(this, true);
    DeliverAll();
  }
  // The ready CQs in the handler's array for the caller to notify (no callback into JS from
  // here); more than one batch: delivered as the doorbell does, 0 returned.
  size_t n = ready_.size();
  if (n == 0) return Napi::Number::New(env, 0);
  Napi::Uint32Array out = readyOut_.IsEmpty() ? Napi::Uint32Array() : readyOut_.Value();
  if (n <= static_cast<size_t>(abi::CQ_READY_BATCH) && !out.IsEmpty() && out.ElementLength() >= n) {
    std::copy_n(ready_.data(), n, out.Data());
    ready_.clear();
    return Napi::Number::New(env, static_cast<double>(n));
  }
  RingHold hold(this, true);
  DeliverReady();
  return Napi::Number::New(env, 0);
}

Napi::Function SoftDevice::Define(Napi::Env env) {
  using T = rdmajs::Tagged<SoftDevice>;
  return DefineDevice(env, {
                               T::Def<&SoftDevice::EndpointBase>(env, "endpointBase"),
                               T::Def<&SoftDevice::Inject>(env, "inject"),
                               T::Def<&SoftDevice::ToRtrLink>(env, "toRtrLink"),
                               T::Def<&SoftDevice::LinkTake>(env, "linkTake"),
                               T::Def<&SoftDevice::LinkWrite>(env, "linkWrite"),
                               T::Def<&SoftDevice::LinkSend>(env, "linkSend"),
                               T::Def<&SoftDevice::LinkDone>(env, "linkDone"),
                               T::Def<&SoftDevice::LinkProgress>(env, "linkProgress"),
                               T::Def<&SoftDevice::Respond>(env, "respond"),
                               T::Def<&SoftDevice::RespondFrame>(env, "respondFrame"),
                               T::Def<&SoftDevice::Place>(env, "place"),
                               T::Def<&SoftDevice::LinkFlushSoon>(env, "linkFlushSoon"),
                               T::Def<&SoftDevice::OnLinkFlush>(env, "onLinkFlush"),
                               T::Def<&SoftDevice::WakeOwed>(env, "wakeOwed"),
                               T::Def<&SoftDevice::Stats>(env, "stats"),
                               T::Def<&SoftDevice::SpinCq>(env, "spinCq"),
                               T::Def<&SoftDevice::FlushDoorbells>(env, "flushDoorbells"),
                           });
}

void SoftDevice::Teardown() {
  StopPoll(poll_);
  StopTimer(timer_);
  if (step_) {
    uv_idle_stop(step_);
    uv_close(reinterpret_cast<uv_handle_t*>(step_), [](uv_handle_t* h) { delete reinterpret_cast<uv_idle_t*>(h); });
    step_ = nullptr;
  }
  if (prepare_) {
    uv_prepare_stop(prepare_);
    uv_close(reinterpret_cast<uv_handle_t*>(prepare_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_prepare_t*>(h); });
    prepare_ = nullptr;
    prepareActive_ = false;
  }
  if (flushCheck_) {
    uv_check_stop(flushCheck_);
    uv_close(reinterpret_cast<uv_handle_t*>(flushCheck_),
             [](uv_handle_t* h) { delete reinterpret_cast<uv_check_t*>(h); });
    flushCheck_ = nullptr;
    uv_idle_stop(flushIdle_);
    uv_close(reinterpret_cast<uv_handle_t*>(flushIdle_), [](uv_handle_t* h) { delete reinterpret_cast<uv_idle_t*>(h); });
    flushIdle_ = nullptr;
    flushArmed_ = false;
  }
  linkFlush_.Reset();
  Retire();
  dev_.reset();  // revokes every registration, waiting for peers' copies
  for (auto& [h, o] : owned_) on_unregistered(o.mapping);
  owned_.clear();
  held_.clear();
  Detach();
}

// An explicit close gives allocMr memory back at once: views are detached first.
Napi::Value SoftDevice::Close(const Napi::CallbackInfo& info) {
  Retire();
  dev_.reset();  // QPs go, then registrations are revoked: peers' copies end first
  for (auto& [h, o] : owned_) {
    DetachBuffer(o.buffer);
    unmap(o.mapping);
  }
  Teardown();
  return info.Env().Undefined();
}

void SoftDevice::OnReadable(uv_poll_t* p, int status, int) {
  auto* self = static_cast<SoftDevice*>(p->data);
  if (status < 0 || !self->dev_) return;
  // One read takes the whole count and resets it (not a semaphore eventfd): a second would
  // only return EAGAIN, a system call per wake-up. A ring after it makes the fd readable
  // again (level-triggered), so none is lost.
  uint64_t v;
  ssize_t r = read(self->dev_->segment().eventfd(), &v, sizeof v);
  (void)r;
  self->RunDoorbell();
}

void SoftDevice::TakeDoorbell() {
  // What TakeReadyNow took and could not hand over is delivered with this doorbell's.
  if (takenKept_) {
    takenKept_ = false;
  } else {
    events_.clear();
    ready_.clear();
  }
  dev_->onDoorbell(events_, ready_);
  Schedule();
}

int SoftDevice::TakeReadyNow() {
  if (!dev_ || takenKept_) return -1;
  if (!doorbellOwed_) return 0;
  doorbellOwed_ = false;
  TakeDoorbell();
  size_t n = ready_.size();
  Napi::Uint32Array out = readyOut_.IsEmpty() ? Napi::Uint32Array() : readyOut_.Value();
  if (!events_.empty() || n > static_cast<size_t>(abi::CQ_READY_BATCH) || out.IsEmpty() || out.ElementLength() < n) {
    takenKept_ = true;
    return -1;
  }
  std::copy_n(ready_.data(), n, out.Data());
  ready_.clear();
  // As wakeOwed ends the JS job it was called from: the doorbells its posts owe peers ring now.
  RingHold hold(this, true);
  return static_cast<int>(n);
}

void SoftDevice::RunDoorbell() {
  TakeDoorbell();
  RingHold hold(this, true);
  DeliverAll();
  DeliverReady();
}

void SoftDevice::DeliverReady() {
  if (ready_.empty() || readyOut_.IsEmpty()) return;
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  // Nothing in JS can run onDoorbell again meanwhile (only libuv does): ready_ stays put.
  for (size_t i = 0; i < ready_.size(); i += abi::CQ_READY_BATCH) {
    size_t n = std::min(ready_.size() - i, static_cast<size_t>(abi::CQ_READY_BATCH));
    // Looked up on each call: JS owns the array and V8 may move its storage.
    Napi::Uint32Array out = readyOut_.Value();
    if (out.IsEmpty() || out.ElementLength() < n) break;
    std::copy_n(ready_.data() + i, n, out.Data());
    // Not stopped by a failed delivery: the rest of the batch would never be notified.
    Deliver(abi::EV_CQS_READY, static_cast<int>(n));
  }
  ready_.clear();  // keeps its capacity: no allocation per wake-up
}

Napi::Value SoftDevice::EndpointBase(const Napi::CallbackInfo& info) {
  if (!Alive(info)) return info.Env().Undefined();
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", static_cast<double>(dev_->pid()));
  o.Set("segFd", dev_->segment().memfd());
  o.Set("bellFd", dev_->segment().eventfd());
  o.Set("bootId", std::string(dev_->segment().header()->bootId));
  o.Set("nonce", static_cast<double>(dev_->segment().header()->nonce));
  return o;
}

namespace {

Napi::Value SoftLimits(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  using L = soft::DeviceLimits;
  Napi::Object o = Napi::Object::New(env);
  o.Set("maxQp", soft::kQpSlots);
  o.Set("maxQpWr", L::maxQpWr);
  o.Set("maxSge", L::maxSge);
  o.Set("maxCqe", L::maxCqe);
  o.Set("maxMr", soft::kMrSlots - 1);
  o.Set("maxMrSize", Napi::BigInt::New(info.Env(), static_cast<uint64_t>(L::maxMrSize)));  // 64-bit: exact
  o.Set("maxMsgSize", static_cast<double>(L::maxMsg));
  o.Set("maxInlineData", L::maxInline);
  o.Set("maxSrqWr", L::maxSrqWr);
  o.Set("bootId", soft::boot_id());
  return o;
}

}  // namespace

void register_soft(Napi::Env env, Napi::Object exports) {
  exports.Set("SoftDevice", SoftDevice::Define(env));
  exports.Set("softLimits", Napi::Function::New(env, SoftLimits));
}

}  // namespace rdmajs

// What both providers' device objects (SoftDevice, IbvDevice) share on the Node-API side:
// the type tag and live-instance check (tagged.h), the JS event handler and its async
// context, libuv handles on the device's file descriptors, the environment cleanup hook
// (a worker may exit with the device open), memory handed to JS, and the methods of the
// one handle-based surface of src/internal/native.ts. T derives from DeviceWrap<T> and
// provides Open() (not closed), Teardown() (idempotent), Delivering() and the methods.
#pragma once

#include <napi.h>
#include <uv.h>

#include <cerrno>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "abi.h"
#include "addon.h"
#include "tagged.h"

// Declares, in a provider's device class, the methods of the surface DefineDevice lists;
// each provider defines them in its own files.
#define RDMAJS_DEVICE_SURFACE                              \
  Napi::Value Close(const Napi::CallbackInfo& info);       \
  Napi::Value AllocMr(const Napi::CallbackInfo& info);     \
  Napi::Value RegMr(const Napi::CallbackInfo& info);       \
  Napi::Value DeregMr(const Napi::CallbackInfo& info);     \
  Napi::Value CreateCq(const Napi::CallbackInfo& info);    \
  Napi::Value DestroyCq(const Napi::CallbackInfo& info);   \
  Napi::Value CqCapacity(const Napi::CallbackInfo& info);  \
  Napi::Value PollCq(const Napi::CallbackInfo& info);      \
  Napi::Value CqCount(const Napi::CallbackInfo& info);     \
  Napi::Value ArmCq(const Napi::CallbackInfo& info);       \
  Napi::Value CreateSrq(const Napi::CallbackInfo& info);   \
  Napi::Value DestroySrq(const Napi::CallbackInfo& info);  \
  Napi::Value PostSrqRecv(const Napi::CallbackInfo& info); \
  Napi::Value ArmSrqLimit(const Napi::CallbackInfo& info); \
  Napi::Value CreateQp(const Napi::CallbackInfo& info);    \
  Napi::Value DestroyQp(const Napi::CallbackInfo& info);   \
  Napi::Value QpInfo(const Napi::CallbackInfo& info);      \
  Napi::Value QpState(const Napi::CallbackInfo& info);     \
  Napi::Value ModifyQp(const Napi::CallbackInfo& info);    \
  Napi::Value PostSend(const Napi::CallbackInfo& info);    \
  Napi::Value PostRecv(const Napi::CallbackInfo& info);

namespace rdmajs {

template <typename T>
class DeviceWrap : public Napi::ObjectWrap<T> {
 public:
  // The class with the methods both providers have plus T's own (`extra`).
  static Napi::Function DefineDevice(Napi::Env env, std::vector<typename Tagged<T>::Entry> extra) {
    using M = Tagged<T>;
    std::vector<typename M::Entry> methods = {
        M::template Def<&T::Close>(env, "close"),
        M::template Def<&T::AllocMr>(env, "allocMr"),
        M::template Def<&T::RegMr>(env, "regMr"),
        M::template Def<&T::DeregMr>(env, "deregMr"),
        M::template Def<&T::CreateCq>(env, "createCq"),
        M::template Def<&T::DestroyCq>(env, "destroyCq"),
        M::template Def<&T::CqCapacity>(env, "cqCapacity"),
        M::template Def<&T::PollCq>(env, "pollCq"),
        M::template Def<&T::CqCount>(env, "cqCount"),
        M::template Def<&T::ArmCq>(env, "armCq"),
        M::template Def<&T::CreateSrq>(env, "createSrq"),
        M::template Def<&T::DestroySrq>(env, "destroySrq"),
        M::template Def<&T::PostSrqRecv>(env, "postSrqRecv"),
        M::template Def<&T::ArmSrqLimit>(env, "armSrqLimit"),
        M::template Def<&T::CreateQp>(env, "createQp"),
        M::template Def<&T::DestroyQp>(env, "destroyQp"),
        M::template Def<&T::QpInfo>(env, "qpInfo"),
        M::template Def<&T::QpState>(env, "qpState"),
        M::template Def<&T::ModifyQp>(env, "modifyQp"),
        M::template Def<&T::PostSend>(env, "postSend"),
        M::template Def<&T::PostRecv>(env, "postRecv"),
    };
    for (auto& e : extra) methods.push_back(std::move(e));
    return M::Class(env, T::kClassName, methods);
  }

 protected:
  explicit DeviceWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<T>(info) {
    cell_ = Tagged<T>::Adopt(self(), info.This().As<Napi::Object>());
  }
  ~DeviceWrap() override { Tagged<T>::Release(self(), cell_); }

  // Once the device is open: events can be delivered, and the environment's teardown
  // closes the device if JS did not.
  void Attach(Napi::Env env, const char* resource) {
    asyncContext_ = std::make_unique<Napi::AsyncContext>(env, resource);
    env_ = env;
    napi_add_env_cleanup_hook(env, &DeviceWrap::OnEnvCleanup, this);
    hookAdded_ = true;
  }
  // From T::Teardown.
  void Detach() {
    if (!hookAdded_) return;
    napi_remove_env_cleanup_hook(env_, &DeviceWrap::OnEnvCleanup, this);
    hookAdded_ = false;
  }

  static uv_loop_t* Loop(Napi::Env env) {
    uv_loop_t* loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    return loop;
  }
  // A readable watch on fd; an idle device keeps no process alive (unref'd). data = T*.
  uv_poll_t* StartPoll(uv_loop_t* loop, int fd, uv_poll_cb cb) {
    auto* p = new uv_poll_t;
    p->data = self();
    uv_poll_init(loop, p, fd);
    uv_poll_start(p, UV_READABLE, cb);
    uv_unref(reinterpret_cast<uv_handle_t*>(p));
    return p;
  }
  static void StopPoll(uv_poll_t*& p) {
    if (!p) return;
    uv_poll_stop(p);
    uv_close(reinterpret_cast<uv_handle_t*>(p), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
    p = nullptr;
  }
  uv_timer_t* StartTimer(uv_loop_t* loop) {
    auto* t = new uv_timer_t;
    t->data = self();
    uv_timer_init(loop, t);
    uv_unref(reinterpret_cast<uv_handle_t*>(t));
    return t;
  }
  static void StopTimer(uv_timer_t*& t) {
    if (!t) return;
    uv_timer_stop(t);
    uv_close(reinterpret_cast<uv_handle_t*>(t), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    t = nullptr;
  }

  // Hands events_ to the JS handler, from a libuv callback. The handler may close the
  // device or cause new events: it sees a batch taken out of events_ first.
  void DeliverAll() {
    if (events_.empty()) return;
    Napi::Env env = this->Env();
    Napi::HandleScope scope(env);
    delivering_.swap(events_);
    events_.clear();
    for (auto& [kind, handle] : delivering_) {
      Deliver(kind, handle);  // a throw must not drop the rest (each reaches the process)
    }
  }

  // One event to the JS handler (inside a HandleScope); false when the handler is gone
  // or threw (the exception went to the process).
  bool Deliver(int kind, int handle) {
    return !onEvent_.IsEmpty() && self()->Delivering() &&
           deliver_event(this->Env(), static_cast<napi_async_context>(*asyncContext_), this->Value(), onEvent_.Value(),
                         kind, handle);
  }

  // Calls `fn()` as an event callback (its microtasks run when it returns); false when it
  // threw (the exception went to the process).
  bool CallBack(const Napi::FunctionReference& fn) {
    if (fn.IsEmpty()) return false;
    Napi::Env env = this->Env();
    napi_value result;
    if (napi_make_callback(env, static_cast<napi_async_context>(*asyncContext_), this->Value(), fn.Value(), 0,
                           nullptr, &result) == napi_ok)
      return true;
    bool pending = false;
    napi_value error;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending &&
        napi_get_and_clear_last_exception(env, &error) == napi_ok)
      napi_fatal_exception(env, error);
    return false;
  }

  // False with ERR_RDMA_CLOSED pending once the device is closed.
  bool Alive(const Napi::CallbackInfo& info) {
    if (self()->Open()) return true;
    system_error(info.Env(), T::kClassName, EBADF, "device is closed", "ERR_RDMA_CLOSED").ThrowAsJavaScriptException();
    return false;
  }
  Napi::Value Fail(const Napi::CallbackInfo& info, int err, const std::string& why, const char* code) {
    system_error(info.Env(), T::kClassName, err, why.c_str(), code).ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }

  // Argument i of the constructor as the post record (abi.h): a Uint32Array of
  // POST_RECORD_WORDS, kept for the device's life. False with a typed error pending.
  bool AdoptPostRecord(const Napi::CallbackInfo& info, size_t i, const char* usage) {
    napi_typedarray_type type;
    size_t length = 0;
    if (i < info.Length() && info[i].IsTypedArray() &&
        napi_get_typedarray_info(info.Env(), info[i], &type, &length, nullptr, nullptr, nullptr) == napi_ok &&
        type == napi_uint32_array && length == static_cast<size_t>(abi::POST_RECORD_WORDS)) {
      postRecord_ = Napi::Persistent(info[i].As<Napi::Uint32Array>());
      return true;
    }
    system_error(info.Env(), T::kClassName, EINVAL, usage, "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException();
    return false;
  }

  // A post's result: written into the post record, and its code returned (a small integer:
  // nothing is allocated). The record's storage is looked up on each call: V8 may move a
  // small typed array's storage until first asked for it.
  Napi::Value Posted(Napi::Env env, abi::PostResult r) {
    napi_value rec;
    void* data = nullptr;
    size_t length = 0;
    napi_typedarray_type type;
    if (napi_get_reference_value(env, postRecord_, &rec) == napi_ok && rec &&
        napi_get_typedarray_info(env, rec, &type, &length, &data, nullptr, nullptr) == napi_ok &&
        type == napi_uint32_array && length >= static_cast<size_t>(abi::POST_RECORD_WORDS) && data) {
      auto* w = static_cast<uint32_t*>(data);
      w[abi::POST_REC_POSTED] = r.posted;
      w[abi::POST_REC_CODE] = static_cast<uint32_t>(r.code);
    }
    return Napi::Number::New(env, r.code);
  }

  // Memory from allocMr whose registration is gone: no JS view reaches it any more.
  static void DetachBuffer(Napi::Reference<Napi::ArrayBuffer>& buffer) {
    Napi::ArrayBuffer ab = buffer.Value();
    if (!ab.IsEmpty() && !ab.IsDetached()) ab.Detach();
  }

  Napi::FunctionReference onEvent_;
  Napi::Reference<Napi::Uint32Array> postRecord_;
  std::vector<std::pair<int, int>> events_;  // (kind, handle), filled by T's libuv callbacks

 private:
  T* self() { return static_cast<T*>(this); }
  static void OnEnvCleanup(void* p) {
    auto* d = static_cast<DeviceWrap*>(p);
    d->hookAdded_ = false;
    d->self()->Teardown();
  }

  typename Tagged<T>::Cell* cell_ = nullptr;  // what its own bound methods reach it through
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
  std::vector<std::pair<int, int>> delivering_;
  napi_env env_ = nullptr;
  bool hookAdded_ = false;
};

}  // namespace rdmajs

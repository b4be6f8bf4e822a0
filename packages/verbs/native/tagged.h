// Methods of an ObjectWrap reachable only through objects of that class: SoftDevice.
// prototype.pollCq called on an IbvDevice, or on any other object, is a typed error instead
// of one C++ object read as another. Each instance is type-tagged (napi_type_tag_object) at
// construction, and its native pointer is entered in a per-thread registry of live
// instances: a call checks the unwrapped pointer against the registry (a hash lookup, on
// the hot path of every post and poll) and falls back to the type tag only to report what
// went wrong. A pointer in the registry is a live instance of T, so nothing else passes.
#pragma once

#include <napi.h>

#include <cerrno>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "addon.h"

namespace rdmajs {

template <typename T>
struct Tagged {
  using Method = Napi::Value (T::*)(const Napi::CallbackInfo&);

  // Objects live on the thread of their environment (main thread or a worker's).
  static std::unordered_set<const void*>& live() {
    thread_local std::unordered_set<const void*> set;
    return set;
  }
  // From T's constructor and destructor.
  static void Adopt(T* self, Napi::Object wrapper) {
    wrapper.TypeTag(&T::kTypeTag);
    live().insert(self);
  }
  static void Release(T* self) { live().erase(self); }

  template <Method M>
  static Napi::Value Call(const Napi::CallbackInfo& info) {
    Napi::Value self = info.This();
    void* p = nullptr;
    if (self.IsObject() && napi_unwrap(info.Env(), self, &p) == napi_ok && p && live().count(p))
      return (static_cast<T*>(p)->*M)(info);
    // napi_unwrap may have left an exception pending for an unwrapped object.
    bool pending = false;
    if (napi_is_exception_pending(info.Env(), &pending) == napi_ok && pending) {
      napi_value ignored;
      napi_get_and_clear_last_exception(info.Env(), &ignored);
    }
    bool tagged = self.IsObject() && self.As<Napi::Object>().CheckTypeTag(&T::kTypeTag);
    std::string why = std::string("the receiver is not a ") + (tagged ? "live " : "") + T::kClassName;
    system_error(info.Env(), T::kClassName, EBADF, why.c_str(), "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }

  using Entry = std::pair<const char*, Napi::Function>;

  template <Method M>
  static Entry Def(Napi::Env env, const char* name) {
    return {name, Napi::Function::New<&Call<M>>(env, name)};
  }

  // The class with these prototype methods, each going through Call (in place of
  // ObjectWrap::InstanceMethod, which unwraps any wrapped object unchecked).
  static Napi::Function Class(Napi::Env env, const char* name, const std::vector<Entry>& methods) {
    Napi::Function ctor = T::DefineClass(env, name, std::vector<Napi::ClassPropertyDescriptor<T>>{});
    Napi::Object proto = ctor.Get("prototype").As<Napi::Object>();
    for (const Entry& e : methods)
      proto.DefineProperty(Napi::PropertyDescriptor::Value(e.first, e.second, napi_default));
    return ctor;
  }
};

}  // namespace rdmajs

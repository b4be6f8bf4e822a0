// Methods of an ObjectWrap reachable only through objects that carry its type tag
// (napi_type_tag_object): SoftDevice.prototype.pollCq called on an IbvDevice, or on any
// other object, is a typed error instead of one C++ object read as another.
#pragma once

#include <napi.h>

#include <cerrno>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "addon.h"

namespace rdmajs {

template <typename T>
struct Tagged {
  using Method = Napi::Value (T::*)(const Napi::CallbackInfo&);

  template <Method M>
  static Napi::Value Call(const Napi::CallbackInfo& info) {
    Napi::Value self = info.This();
    T* t = nullptr;
    if (self.IsObject() && self.As<Napi::Object>().CheckTypeTag(&T::kTypeTag)) t = T::Unwrap(self.As<Napi::Object>());
    if (!t) {
      std::string why = std::string("the receiver is not a ") + T::kClassName;
      system_error(info.Env(), T::kClassName, EBADF, why.c_str(), "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException();
      return info.Env().Undefined();
    }
    return (t->*M)(info);
  }

  using Entry = std::pair<const char*, Napi::Function>;

  template <Method M>
  static Entry Def(Napi::Env env, const char* name) {
    return {name, Napi::Function::New(env, &Call<M>, name)};
  }

  // The class with these prototype methods, each going through Call (in place of
  // ObjectWrap::InstanceMethod, which unwraps any wrapped object unchecked).
  static Napi::Function Class(Napi::Env env, const char* name, std::initializer_list<Entry> methods) {
    Napi::Function ctor = T::DefineClass(env, name, std::vector<Napi::ClassPropertyDescriptor<T>>{});
    Napi::Object proto = ctor.Get("prototype").As<Napi::Object>();
    for (const Entry& e : methods) proto.DefineProperty(Napi::PropertyDescriptor::Value(e.first, e.second, napi_default));
    return ctor;
  }
};

}  // namespace rdmajs

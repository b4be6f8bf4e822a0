// Methods of an ObjectWrap reachable only through objects of that class: SoftDevice.
// prototype.pollCq called on an IbvDevice, or on any other object, is a typed error instead
// of one C++ object read as another. Each instance is type-tagged (napi_type_tag_object) at
// construction, and its native pointer is entered in a per-thread registry of live
// instances: a call checks the unwrapped pointer against the registry (a hash lookup) and
// falls back to the type tag only to report what went wrong. A pointer in the registry is a
// live instance of T, so nothing else passes.
//
// The hot path does not unwrap: each instance also gets the same methods as own properties,
// bound to it through a cell (napi_unwrap is a private-symbol lookup through V8's runtime,
// about a fifth of a post's or poll's crossing). The cell outlives the instance (the
// functions may be held elsewhere): the destructor empties it, and a call through an empty
// cell is the same typed error as a call on a dead receiver.
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
  // What an instance's own methods reach it through: emptied by its destructor, freed by
  // whichever of it and the functions lets go last.
  struct Cell {
    T* self;
    size_t refs;
  };
  static void Unref(Cell* c) {
    if (--c->refs == 0) delete c;
  }

  // From T's constructor and destructor.
  static Cell* Adopt(T* self, Napi::Object wrapper) {
    wrapper.TypeTag(&T::kTypeTag);
    live().insert(self);
    Napi::Env env = wrapper.Env();
    auto* cell = new Cell{self, 1};
    std::vector<napi_property_descriptor> props;
    props.reserve(bound().size());
    for (const auto& [name, make] : bound()) {
      napi_value fn = make(env, name, cell);
      if (!fn) continue;  // an exception is pending: the constructor's caller sees it
      cell->refs++;
      if (napi_add_finalizer(env, fn, cell, [](napi_env, void* data, void*) { Unref(static_cast<Cell*>(data)); },
                             nullptr, nullptr) != napi_ok)
        cell->refs--;  // never freed before the instance: at worst kept
      props.push_back(napi_property_descriptor{name, nullptr, nullptr, nullptr, nullptr, fn, napi_default, nullptr});
    }
    napi_define_properties(env, wrapper, props.size(), props.data());
    return cell;
  }
  static void Release(T* self, Cell* cell) {
    live().erase(self);
    if (cell) {
      cell->self = nullptr;
      Unref(cell);
    }
  }

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

  // The own, bound method: the cell names the instance, so no unwrap and no lookup.
  template <Method M>
  static napi_value BoundCall(napi_env env, napi_callback_info cbinfo) {
    Napi::CallbackInfo info(env, cbinfo);
    auto* cell = static_cast<Cell*>(info.Data());
    if (cell && cell->self) return (cell->self->*M)(info);
    system_error(info.Env(), T::kClassName, EBADF, "the receiver is not a live device", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return nullptr;
  }
  using MakeBound = napi_value (*)(napi_env, const char*, Cell*);
  template <Method M>
  static napi_value Make(napi_env env, const char* name, Cell* cell) {
    napi_value fn = nullptr;
    if (napi_create_function(env, name, NAPI_AUTO_LENGTH, &BoundCall<M>, cell, &fn) != napi_ok) return nullptr;
    return fn;
  }
  // The methods Class() put on the prototype, bound again per instance by Adopt().
  static std::vector<std::pair<const char*, MakeBound>>& bound() {
    thread_local std::vector<std::pair<const char*, MakeBound>> table;
    return table;
  }

  struct Entry {
    const char* first;
    Napi::Function second;
    MakeBound make;
  };

  template <Method M>
  static Entry Def(Napi::Env env, const char* name) {
    return {name, Napi::Function::New<&Call<M>>(env, name), &Make<M>};
  }

  // The class with these prototype methods, each going through Call (in place of
  // ObjectWrap::InstanceMethod, which unwraps any wrapped object unchecked).
  static Napi::Function Class(Napi::Env env, const char* name, const std::vector<Entry>& methods) {
    Napi::Function ctor = T::DefineClass(env, name, std::vector<Napi::ClassPropertyDescriptor<T>>{});
    Napi::Object proto = ctor.Get("prototype").As<Napi::Object>();
    bound().clear();
    for (const Entry& e : methods) {
      proto.DefineProperty(Napi::PropertyDescriptor::Value(e.first, e.second, napi_default));
      bound().emplace_back(e.first, e.make);
    }
    return ctor;
  }
};

}  // namespace rdmajs

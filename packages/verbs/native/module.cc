// Node-API module init: the addon's per-environment data, the contract's table (abi()),
// the JS error class, and each provider's exports (soft_device.cc, ibv/).
#include <napi.h>

#include "abi.h"
#include "addon.h"

namespace {

using rdmajs::AddonData;
namespace abi = rdmajs::abi;

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  auto* data = info.Env().GetInstanceData<AddonData>();
  if (!data || !info[0].IsFunction()) {
    Napi::TypeError::New(info.Env(), "setErrorClass takes the RdmaSystemError class").ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }
  data->systemError = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

// abi(): the contract's table, which the loader checks against src/internal/abi.ts.
Napi::Value AbiTable(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  for (const auto& e : abi::kTable) o.Set(e.name, e.value);
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonData());
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass));
  exports.Set("abi", Napi::Function::New(env, AbiTable));
  rdmajs::register_soft(env, exports);
  rdmajs::register_ibverbs(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(rdmajs_verbs, Init)

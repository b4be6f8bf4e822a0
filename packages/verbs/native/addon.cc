// The helpers both providers' adapters share (addon.h): RdmaSystemError and event delivery.
#include "addon.h"

#include <cstring>
#include <string>
#include <vector>

namespace rdmajs {

Napi::Error system_error(Napi::Env env, const char* syscall, int err, const char* detail, const char* code) {
  std::string message = std::strerror(err);
  if (detail) message += std::string(": ") + detail;
  auto* data = env.GetInstanceData<AddonData>();
  if (data && !data->systemError.IsEmpty()) {
    std::vector<napi_value> args = {Napi::String::New(env, syscall), Napi::Number::New(env, err),
                                    Napi::String::New(env, message)};
    if (code) args.push_back(Napi::String::New(env, code));
    Napi::Object e = data->systemError.New(args);
    return Napi::Error(env, e);
  }
  return Napi::Error::New(env, std::string(syscall) + ": " + message);
}

bool deliver_event(Napi::Env env, napi_async_context context, napi_value recv, napi_value fn, int kind, int handle) {
  napi_value argv[2] = {Napi::Number::New(env, kind), Napi::Number::New(env, handle)};
  napi_value result;
  if (napi_make_callback(env, context, recv, fn, 2, argv, &result) == napi_ok) return true;
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value error;
    if (napi_get_and_clear_last_exception(env, &error) == napi_ok) napi_fatal_exception(env, error);
  }
  return false;
}

}  // namespace rdmajs

// What the providers' Node-API adapters share: the JS error class for system failures.
#pragma once
#include <napi.h>

namespace rdmajs {

struct AddonData {
  Napi::FunctionReference systemError;  // RdmaSystemError(syscall, errno, message)
};

// An RdmaSystemError keeping errno and the verb that failed (falls back to a plain Error).
Napi::Error system_error(Napi::Env env, const char* syscall, int err);

// Registers the ibverbs provider's exports (IbvDevice, ibvStatus); without libibverbs
// headers at build time, ibvStatus() says so and nothing else is exported.
void register_ibverbs(Napi::Env env, Napi::Object exports);

}  // namespace rdmajs

// What the providers' Node-API adapters share: the JS error class for system failures.
#pragma once
#include <napi.h>

#include <cstdint>
#include <vector>

namespace rdmajs {

struct Mapping;
struct AddonData {
  Napi::FunctionReference systemError;  // RdmaSystemError(syscall, errno, message)
  // Registered memory a peer may still be copying into when its device closed (a pin that
  // outlived the bound): kept, never unmapped or released, for the life of the environment.
  std::vector<Mapping*> retiredMappings;
  std::vector<Napi::Reference<Napi::ArrayBuffer>> retiredBuffers;
  uint64_t retiredBytes = 0;
};

// An RdmaSystemError keeping errno and the verb that failed (falls back to a plain Error).
// `detail` is appended to strerror(err); `code` overrides ERR_RDMA_SYSTEM (e.g. a stale
// handle is ERR_RDMA_INVALID_ARG, a closed device ERR_RDMA_CLOSED).
Napi::Error system_error(Napi::Env env, const char* syscall, int err, const char* detail = nullptr,
                         const char* code = nullptr);

// Registered memory from allocMr has two owners: its registration (until deregistered or
// the device goes) and its ArrayBuffer (until detached or collected). The pages go when both
// have let go, so they are never unmapped while a peer or the NIC may still write them. That
// matters at worker exit, where Node collects the buffers before the device's cleanup hook
// has revoked the registrations.
struct Mapping {
  void* base;
  size_t length;
  int fd;  // backing memfd, or -1
  bool registered = true;
  bool reachable = true;
};
void unmap(Mapping* m);                                  // gives the pages back now
void on_buffer_collected(Napi::Env, void*, Mapping* m);  // ArrayBuffer finalizer
void on_unregistered(Mapping* m);                        // the registration is gone
// Wraps m's pages in an ArrayBuffer that V8 does not count as external memory, whose
// collection calls on_buffer_collected. On failure (a length the runtime cannot view, e.g.
// > 4 GiB on Node 20) returns false with an RdmaSystemError pending and nothing of `m` taken:
// the caller unregisters and unmaps.
bool wrap_mapping(Napi::Env env, Mapping* m, Napi::ArrayBuffer* out);

// Calls a device's JS event handler from a libuv callback, where no JS frame can take a
// thrown exception: node-addon-api's MakeCallback would re-throw a failure through
// napi_throw, which aborts the process while the environment shuts down (a terminated
// worker). A handler's own exception goes to 'uncaughtException', as for any event-loop
// callback. False when JS cannot run (stop delivering).
bool deliver_event(Napi::Env env, napi_async_context context, napi_value recv, napi_value fn, int kind, int handle);

// Registers the soft provider's exports (SoftDevice, softLimits): soft_device.cc.
void register_soft(Napi::Env env, Napi::Object exports);

// Registers the ibverbs provider's exports (IbvDevice, ibvStatus); without libibverbs
// headers at build time, ibvStatus() says so and nothing else is exported.
void register_ibverbs(Napi::Env env, Napi::Object exports);

}  // namespace rdmajs

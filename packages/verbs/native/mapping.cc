// Registered pages and the ArrayBuffer that views them (see Mapping in addon.h).
#include <sys/mman.h>
#include <unistd.h>

#include <v8.h>

#include <cerrno>
#include <memory>
#include <string>

#include "addon.h"

namespace rdmajs {

void unmap(Mapping* m) {
  if (!m->base) return;
  munmap(m->base, m->length);
  if (m->fd >= 0) close(m->fd);
  m->base = nullptr;
}

void on_buffer_collected(Napi::Env, void*, Mapping* m) {
  m->reachable = false;
  if (m->registered) return;
  unmap(m);
  delete m;
}

void on_unregistered(Mapping* m) {
  m->registered = false;
  if (m->reachable) return;
  unmap(m);
  delete m;
}

namespace {

// The JS object was collected (or the environment is going): the ArrayBuffer no longer
// reaches the pages. Runs once per wrap_mapping that succeeded.
void finalize_buffer(napi_env env, void* data, void*) {
  on_buffer_collected(Napi::Env(env), nullptr, static_cast<Mapping*>(data));
}

}  // namespace

bool wrap_mapping(Napi::Env env, Mapping* m, Napi::ArrayBuffer* out) {
  // Past this V8 cannot view the bytes as one typed array (4 GiB on Node 20); V8 would abort
  // the process rather than fail, so it is refused here with the reason.
  if (m->length > v8::TypedArray::kMaxLength) {
    std::string why = "Node.js cannot view " + std::to_string(m->length) + " bytes as one ArrayBuffer (at most " +
                      std::to_string(v8::TypedArray::kMaxLength) + ")";
    system_error(env, "v8::ArrayBuffer::New", EOVERFLOW, why.c_str()).ThrowAsJavaScriptException();
    return false;
  }
  // V8 counts the backing store of every ArrayBuffer that has a deleter (Node-API's external
  // ArrayBuffers all do) as external memory a GC may give back, and 1 GiB of it sets off full
  // collections: at once ("external memory pressure") when the heap limit is small, as in a
  // 3 GiB VM, else through incremental marking; each pauses the JS thread and frees nothing.
  // No adjustment can prevent it: V8 moves its limit down with every negative one. A GC can
  // never give these pages back (the device holds the buffer while the memory is registered,
  // deregistration detaches it before unmapping), so the store is made with V8's empty
  // deleter, which V8 does not count. The Node-API finalizer on the JS object tells when it
  // is collected without a detach (worker exit). This is V8's C++ API, not Node-API: the
  // calls used (NewBackingStore with a deleter, ArrayBuffer::New with a store) are the same
  // in every Node release since 14.
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  std::shared_ptr<v8::BackingStore> store =
      v8::ArrayBuffer::NewBackingStore(m->base, m->length, v8::BackingStore::EmptyDeleter, nullptr);
  v8::Local<v8::ArrayBuffer> ab = v8::ArrayBuffer::New(isolate, std::move(store));
  // A napi_value is a v8::Local's slot (Node-API's own conversion, v8impl::JsValueFromV8LocalValue).
  napi_value value = reinterpret_cast<napi_value>(*ab);
  if (napi_add_finalizer(env, value, m, finalize_buffer, nullptr, nullptr) != napi_ok) {
    napi_detach_arraybuffer(env, value);  // no view may outlive the unmap the caller does
    system_error(env, "napi_add_finalizer", ENOMEM).ThrowAsJavaScriptException();
    return false;
  }
  *out = Napi::ArrayBuffer(env, value);
  return true;
}

}  // namespace rdmajs

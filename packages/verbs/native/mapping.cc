// Registered pages and the ArrayBuffer that views them (see Mapping in addon.h).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
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

void counted_again(Napi::Env env, Mapping* m) {
  if (m->uncounted == 0) return;
  int64_t ignored = 0;
  napi_adjust_external_memory(env, m->uncounted, &ignored);
  m->uncounted = 0;
}

namespace {

// The finalizer's hint. Node builds an external ArrayBuffer as a Buffer and, past
// buffer.constants.MAX_LENGTH (4 GiB on Node 20), runs the finalizer *and* reports failure;
// node-addon-api's ArrayBuffer::New then frees its own finalizer data a second time (the
// "double free detected in tcache 2" of a 5 GiB allocMr). This link outlives such a call:
// a finalizer run during creation only marks it, and one that may still come later finds
// it detached from the mapping.
struct BufferLink {
  Mapping* mapping;
  bool creating = true;
  bool finalized = false;
};

void finalize_link(napi_env env, void*, void* hint) {
  auto* link = static_cast<BufferLink*>(hint);
  if (link->creating) {
    link->finalized = true;
    return;
  }
  if (link->mapping) {
    counted_again(Napi::Env(env), link->mapping);  // collected without a detach (worker exit)
    on_buffer_collected(Napi::Env(env), nullptr, link->mapping);
  }
  delete link;
}

}  // namespace

bool wrap_mapping(Napi::Env env, Mapping* m, Napi::ArrayBuffer* out) {
  auto* link = new BufferLink{m};
  // V8 counts an external backing store as memory a GC may give back, and 1 GiB of it sets
  // off full collections ("external memory pressure" at once, then the memory reducer's),
  // each a pause of the JS thread (13–43 ms measured on a loaded host). A GC never gives
  // these pages back: the device holds the buffer while the memory is registered, and
  // deregistration detaches it first. So they are off the count until the store goes, taken
  // off before V8 adds them (adding them first would set off the collection it avoids).
  int64_t ignored = 0;
  auto bytes = static_cast<int64_t>(m->length);
  if (napi_adjust_external_memory(env, -bytes, &ignored) == napi_ok) m->uncounted = bytes;
  napi_value value = nullptr;
  napi_status status = napi_create_external_arraybuffer(env, m->base, m->length, finalize_link, link, &value);
  link->creating = false;
  if (status == napi_ok) {
    if (link->finalized) {  // not seen in practice; the buffer would then own nothing
      counted_again(env, m);
      delete link;
      return false;
    }
    *out = Napi::ArrayBuffer(env, value);
    return true;
  }
  counted_again(env, m);  // V8 never added them
  if (link->finalized) {
    delete link;
  } else {
    link->mapping = nullptr;  // a late finalizer then frees only the link
  }
  // The runtime's own exception (ERR_BUFFER_TOO_LARGE) says why: it becomes the message of
  // a typed error. The caller undoes the registration (no JS runs) and returns.
  std::string why = "Node.js cannot view " + std::to_string(m->length) + " bytes as one ArrayBuffer";
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value e;
    if (napi_get_and_clear_last_exception(env, &e) == napi_ok) {
      Napi::Value msg = Napi::Value(env, e).IsObject() ? Napi::Object(env, e).Get("message") : Napi::Value();
      if (!msg.IsEmpty() && msg.IsString()) why += " (" + msg.As<Napi::String>().Utf8Value() + ")";
    }
  }
  system_error(env, "napi_create_external_arraybuffer", EOVERFLOW, why.c_str()).ThrowAsJavaScriptException();
  return false;
}

}  // namespace rdmajs

// Memory regions of the ibverbs device: allocMr (anonymous pages kept from forked
// children), regMr (a JS buffer held while registered) and deregistration.
#include "device.h"

#include "../records.h"

#include <sys/mman.h>

namespace rdmajs {

Napi::Value IbvDevice::AllocMr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  size_t length = static_cast<size_t>(info[0].As<Napi::Number>().DoubleValue());
  int access = info[1].As<Napi::Number>().Int32Value();
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return (system_error(env, "mmap", errno).ThrowAsJavaScriptException(), env.Undefined());
  // Not copied into forked children (child_process forks before exec): the NIC keeps
  // writing the parent's pages. Set per region, not by ibv_fork_init for all memory.
  madvise(p, length, MADV_DONTFORK);
  ibv_mr* mr = api_->reg_mr(pd_, p, length, access);
  if (!mr) {
    int e = errno;
    munmap(p, length);
    return (system_error(env, "ibv_reg_mr", e).ThrowAsJavaScriptException(), env.Undefined());
  }
  auto* m = new Mapping{p, length, -1};
  Napi::ArrayBuffer ab;
  if (!wrap_mapping(env, m, &ab)) {
    api_->dereg_mr(mr);
    unmap(m);
    delete m;
    return env.Undefined();
  }
  int h = nextHandle_++;
  mrs_[h] = Mr{mr, m, Napi::Persistent(ab)};
  return mr_record(env, h, reinterpret_cast<uint64_t>(p), mr->lkey, mr->rkey, &ab);
}

Napi::Value IbvDevice::RegMr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  if (!info[0].IsArrayBuffer() || !info[1].IsNumber() || !info[2].IsNumber()) {
    system_error(env, kClassName, EINVAL, "regMr(buffer, offset, length, access)", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  double off = info[1].As<Napi::Number>().DoubleValue(), len = info[2].As<Napi::Number>().DoubleValue();
  double size = ab.IsDetached() ? 0 : static_cast<double>(ab.ByteLength());
  // The range must lie inside the buffer: the NIC would otherwise reach past it.
  if (!(off >= 0 && len >= 1 && off + len <= size)) {
    system_error(env, kClassName, EINVAL, "the range is not inside the buffer", "ERR_RDMA_OUT_OF_RANGE")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  size_t offset = static_cast<size_t>(off);
  size_t length = static_cast<size_t>(len);
  int access = info[3].As<Napi::Number>().Int32Value();
  void* addr = static_cast<uint8_t*>(ab.Data()) + offset;
  ibv_mr* mr = api_->reg_mr(pd_, addr, length, access);
  if (!mr) return (system_error(env, "ibv_reg_mr", errno).ThrowAsJavaScriptException(), env.Undefined());
  int h = nextHandle_++;
  mrs_[h] = Mr{mr, nullptr, Napi::Persistent(ab)};  // the buffer stays alive while registered
  return mr_record(env, h, reinterpret_cast<uint64_t>(addr), mr->lkey, mr->rkey);
}

Napi::Value IbvDevice::DeregMr(const Napi::CallbackInfo& info) {
  int h = info[0].As<Napi::Number>().Int32Value();
  auto it = mrs_.find(h);
  if (it == mrs_.end() || !ctx_) return info.Env().Undefined();
  api_->dereg_mr(it->second.mr);
  if (Mapping* m = it->second.mapping) {
    DetachBuffer(it->second.buffer);
    unmap(m);
    on_unregistered(m);
  }
  mrs_.erase(it);
  return info.Env().Undefined();
}

}  // namespace rdmajs

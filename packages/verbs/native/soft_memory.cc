// Memory regions of the soft device: allocMr (memfd pages peers map), regMr (a JS buffer
// held while registered), deregistration, and the quarantine of memory a peer may still
// be copying into.
#include "records.h"
#include "soft_device.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace rdmajs {

Napi::Value SoftDevice::AllocMr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  uint64_t length = soft::to_u64(Num(info, 0));
  if (length == 0 || length > soft::DeviceLimits::maxMrSize)
    return Fail(info, EINVAL, "length must be in [1, maxMrSize]", "ERR_RDMA_OUT_OF_RANGE");
  uint32_t access = U32(info, 1);
  int fd = static_cast<int>(syscall(SYS_memfd_create, "rdmajs-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) return (system_error(env, "memfd_create", errno).ThrowAsJavaScriptException(), env.Undefined());
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    int e = errno;
    close(fd);
    return (system_error(env, "ftruncate", e).ThrowAsJavaScriptException(), env.Undefined());
  }
  soft::seal_size(fd);  // peers map it directly only when it cannot shrink under them
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return (system_error(env, "mmap", e).ThrowAsJavaScriptException(), env.Undefined());
  }
  uint32_t key = 0;
  int h = dev_->regMr(reinterpret_cast<uint64_t>(p), length, access, fd, &key);
  if (h < 0) {
    munmap(p, length);
    close(fd);
    return (system_error(env, "ibv_reg_mr", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
  }
  auto* m = new Mapping{p, length, fd};
  Napi::ArrayBuffer ab;
  if (!rdmajs::wrap_mapping(env, m, &ab)) {
    dev_->deregMr(h);  // never reachable by a peer: the key was not handed out
    unmap(m);
    delete m;
    return env.Undefined();
  }
  owned_[h] = OwnedMemory{Napi::Persistent(ab), m};
  return mr_record(env, h, reinterpret_cast<uint64_t>(p), key, key, &ab);  // one key: lkey = rkey
}

// The buffer is held (a strong reference) while registered: a peer may copy into it until
// deregistration, so it must not be collected before (at worker exit, say).
Napi::Value SoftDevice::RegMr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  if (!info[0].IsArrayBuffer()) return Fail(info, EINVAL, "regMr takes an ArrayBuffer", "ERR_RDMA_INVALID_ARG");
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  uint64_t offset = soft::to_u64(Num(info, 1));
  uint64_t length = soft::to_u64(Num(info, 2));
  uint64_t size = ab.IsDetached() ? 0 : ab.ByteLength();
  if (length == 0 || offset > size || length > size - offset)
    return Fail(info, EINVAL, "the range is not inside the buffer", "ERR_RDMA_OUT_OF_RANGE");
  uint32_t access = U32(info, 3);
  uint64_t addr = reinterpret_cast<uint64_t>(static_cast<uint8_t*>(ab.Data()) + offset);
  uint32_t key = 0;
  int h = dev_->regMr(addr, length, access, -1, &key);
  if (h < 0) return (system_error(env, "ibv_reg_mr", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
  held_[h] = HeldBuffer{Napi::Persistent(ab), length};
  return mr_record(env, h, addr, key, key);
}

// Deregistration of allocMr memory gives it back at once (not at garbage collection):
// its ArrayBuffer is detached first, so no JS view can reach the unmapped pages.
// A peer still copying past the bound (stopped or dead mid-copy) leaves the memory
// quarantined: detached from JS, but mapped (allocMr) or referenced (regMr) until its
// pins drain, so the copy never lands in freed or reused memory. stats() counts it.
Napi::Value SoftDevice::DeregMr(const Napi::CallbackInfo& info) {
  int h = static_cast<int>(soft::to_u32(Num(info, 0)));
  ReleaseDrained();
  uint32_t slot = 0;
  bool quiet = dev_ ? dev_->deregMr(h, &slot) : true;
  auto it = owned_.find(h);
  if (it != owned_.end()) {
    DetachBuffer(it->second.buffer);
    if (quiet) {
      unmap(it->second.mapping);
      on_unregistered(it->second.mapping);
    } else {
      quarantine_.push_back(Held{slot, it->second.mapping, {}, it->second.mapping->length});
    }
    owned_.erase(it);
  }
  auto b = held_.find(h);
  if (b != held_.end()) {
    if (!quiet) quarantine_.push_back(Held{slot, nullptr, std::move(b->second.ref), b->second.length});
    held_.erase(b);
  }
  return info.Env().Undefined();
}

void SoftDevice::Retire() {
  if (!dev_) return;
  std::vector<int> stuck;
  dev_->quiesceQps();  // first: peers must see the QPs gone before the keys
  dev_->revokeMrs(&stuck);
  auto* data = Env().GetInstanceData<AddonData>();
  auto keep = [&](Mapping* m, Napi::Reference<Napi::ArrayBuffer>* buffer, uint64_t bytes) {
    if (!data) return;  // environment going: the process is exiting
    if (m) data->retiredMappings.push_back(m);
    if (buffer) data->retiredBuffers.push_back(std::move(*buffer));
    data->retiredBytes += bytes;
  };
  for (int h : stuck) {
    if (auto o = owned_.find(h); o != owned_.end()) {
      DetachBuffer(o->second.buffer);
      keep(o->second.mapping, nullptr, o->second.mapping->length);
      owned_.erase(o);
    }
    if (auto b = held_.find(h); b != held_.end()) {
      keep(nullptr, &b->second.ref, b->second.length);
      held_.erase(b);
    }
  }
  for (Held& q : quarantine_) keep(q.mapping, q.mapping ? nullptr : &q.buffer, q.bytes);
  quarantine_.clear();
}

void SoftDevice::ReleaseDrained() {
  if (!dev_ || quarantine_.empty()) return;
  std::vector<uint32_t> freed;
  dev_->drainMrSlots(&freed);
  for (uint32_t slot : freed) {
    for (size_t i = 0; i < quarantine_.size(); i++) {
      if (quarantine_[i].slot != slot) continue;
      if (Mapping* m = quarantine_[i].mapping) {
        unmap(m);
        on_unregistered(m);
      }
      quarantine_.erase(quarantine_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
}

Napi::Value SoftDevice::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReleaseDrained();
  Napi::Object o = Napi::Object::New(env);
  uint64_t bytes = 0;
  for (const Held& q : quarantine_) bytes += q.bytes;
  soft::Device::Quarantine dq = dev_ ? dev_->quarantine() : soft::Device::Quarantine{};
  o.Set("quarantinedRegions", static_cast<double>(quarantine_.size()));
  o.Set("quarantinedBytes", static_cast<double>(bytes));
  o.Set("quarantinedQueues", dq.queueBlocks);
  o.Set("drainingQpSlots", dq.qpSlots);
  o.Set("busyQps", dev_ ? dev_->busyQps() : 0u);
  o.Set("doorbellsRung", dev_ ? static_cast<double>(dev_->ringsRung()) : 0.0);
  auto* data = env.GetInstanceData<AddonData>();
  o.Set("retiredRegions", data ? static_cast<double>(data->retiredMappings.size() + data->retiredBuffers.size()) : 0.0);
  o.Set("retiredBytes", data ? static_cast<double>(data->retiredBytes) : 0.0);
  return o;
}

}  // namespace rdmajs

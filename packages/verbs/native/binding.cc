// Node-API module: the soft provider's adapter (ibverbs is in ibv/binding.cc). JS validates, C++ trusts: every argument has
// been range-checked in TypeScript; here they arrive as plain positional numbers.
#include <napi.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "abi.h"
#include "addon.h"
#include "soft/device.h"
#include "soft/wire.h"
#include "tagged.h"

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

bool deliver_event(Napi::Env env, napi_async_context context, napi_value recv, napi_value fn, int kind,
                   int handle) {
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

namespace {

using rdmajs::AddonData;
using rdmajs::system_error;

using rdmajs::Mapping;
using rdmajs::on_buffer_collected;
using rdmajs::on_unregistered;
using rdmajs::unmap;
namespace abi = rdmajs::abi;

class SoftDevice : public Napi::ObjectWrap<SoftDevice> {
 public:
  static constexpr napi_type_tag kTypeTag = {0x7264'6d61'6a73'0001ull, 0x736f'6674'6465'7631ull};
  static constexpr const char* kClassName = "SoftDevice";

  static Napi::Function Define(Napi::Env env) {
    using T = rdmajs::Tagged<SoftDevice>;
    return T::Class(env, kClassName,
                       {
                           T::Def<&SoftDevice::Close>(env, "close"),
                           T::Def<&SoftDevice::EndpointBase>(env, "endpointBase"),
                           T::Def<&SoftDevice::AllocMr>(env, "allocMr"),
                           T::Def<&SoftDevice::RegMr>(env, "regMr"),
                           T::Def<&SoftDevice::DeregMr>(env, "deregMr"),
                           T::Def<&SoftDevice::CreateCq>(env, "createCq"),
                           T::Def<&SoftDevice::DestroyCq>(env, "destroyCq"),
                           T::Def<&SoftDevice::CqCapacity>(env, "cqCapacity"),
                           T::Def<&SoftDevice::PollCq>(env, "pollCq"),
                           T::Def<&SoftDevice::CqCount>(env, "cqCount"),
                           T::Def<&SoftDevice::ArmCq>(env, "armCq"),
                           T::Def<&SoftDevice::CreateSrq>(env, "createSrq"),
                           T::Def<&SoftDevice::DestroySrq>(env, "destroySrq"),
                           T::Def<&SoftDevice::PostSrqRecv>(env, "postSrqRecv"),
                           T::Def<&SoftDevice::ArmSrqLimit>(env, "armSrqLimit"),
                           T::Def<&SoftDevice::CreateQp>(env, "createQp"),
                           T::Def<&SoftDevice::DestroyQp>(env, "destroyQp"),
                           T::Def<&SoftDevice::QpInfo>(env, "qpInfo"),
                           T::Def<&SoftDevice::QpState>(env, "qpState"),
                           T::Def<&SoftDevice::ModifyQp>(env, "modifyQp"),
                           T::Def<&SoftDevice::PostSend>(env, "postSend"),
                           T::Def<&SoftDevice::PostRecv>(env, "postRecv"),
                           T::Def<&SoftDevice::Inject>(env, "inject"),
                           T::Def<&SoftDevice::ToRtrLink>(env, "toRtrLink"),
                           T::Def<&SoftDevice::LinkTake>(env, "linkTake"),
                           T::Def<&SoftDevice::LinkDone>(env, "linkDone"),
                           T::Def<&SoftDevice::Respond>(env, "respond"),
                           T::Def<&SoftDevice::Stats>(env, "stats"),
                       });
  }

  explicit SoftDevice(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SoftDevice>(info) {
    Napi::Env env = info.Env();
    rdmajs::Tagged<SoftDevice>::Adopt(this, info.This().As<Napi::Object>());
    if (!info[0].IsFunction()) {
      system_error(env, kClassName, EINVAL, "new SoftDevice(onEvent) takes a function", "ERR_RDMA_INVALID_ARG")
          .ThrowAsJavaScriptException();
      return;
    }
    onEvent_ = Napi::Persistent(info[0].As<Napi::Function>());
    try {
      dev_ = std::make_unique<soft::Device>();
    } catch (const soft::SysError& e) {
      system_error(env, e.syscall, e.err).ThrowAsJavaScriptException();
      return;
    }
    asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "rdmajs:soft-device");
    uv_loop_t* loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    poll_ = new uv_poll_t;
    poll_->data = this;
    uv_poll_init(loop, poll_, dev_->segment().eventfd());
    uv_poll_start(poll_, UV_READABLE, &SoftDevice::OnReadable);
    uv_unref(reinterpret_cast<uv_handle_t*>(poll_));
    timer_ = new uv_timer_t;
    timer_->data = this;
    uv_timer_init(loop, timer_);
    uv_unref(reinterpret_cast<uv_handle_t*>(timer_));
    env_ = env;
    napi_add_env_cleanup_hook(env, &SoftDevice::Cleanup, this);
    hookAdded_ = true;
  }

  ~SoftDevice() override {
    rdmajs::Tagged<SoftDevice>::Release(this);
    Shutdown();
  }

 private:
  static void Cleanup(void* self) {
    auto* d = static_cast<SoftDevice*>(self);
    d->hookAdded_ = false;
    d->Shutdown();
  }

  void Shutdown() {
    if (poll_) {
      uv_poll_stop(poll_);
      uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
      poll_ = nullptr;
    }
    if (timer_) {
      uv_timer_stop(timer_);
      uv_close(reinterpret_cast<uv_handle_t*>(timer_), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
      timer_ = nullptr;
    }
    Retire();
    dev_.reset();  // revokes every registration, waiting for peers' copies
    for (auto& [h, o] : owned_) on_unregistered(o.mapping);
    owned_.clear();
    held_.clear();
    if (hookAdded_) {
      napi_remove_env_cleanup_hook(env_, &SoftDevice::Cleanup, this);
      hookAdded_ = false;
    }
  }

  // Before the device goes: registrations whose peers' pins do not drain in time, and what
  // is already quarantined, are kept for the life of the environment (a copy may still be
  // under way into them), never unmapped or released.
  void Retire() {
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
        Napi::ArrayBuffer ab = o->second.buffer.Value();
        if (!ab.IsEmpty() && !ab.IsDetached()) ab.Detach();
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

  // Gives back quarantined registrations whose peers' pins have drained since.
  void ReleaseDrained() {
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

  bool Alive(const Napi::CallbackInfo& info) {
    if (dev_) return true;
    system_error(info.Env(), kClassName, EBADF, "device is closed", "ERR_RDMA_CLOSED").ThrowAsJavaScriptException();
    return false;
  }

  // Runs expired retry/RNR/delay timers and arms the libuv timer for the next one.
  void Schedule() {
    if (!dev_ || !timer_ || !dev_->hasBlocked()) return;
    double next = dev_->progressDue();
    if (next <= 0) return;
    double wait = std::max(0.0, std::ceil(next - soft::now_ms()));
    uv_timer_start(timer_, &SoftDevice::OnTimer, static_cast<uint64_t>(wait), 0);
  }

  static void OnTimer(uv_timer_t* t) { static_cast<SoftDevice*>(t->data)->Schedule(); }

  static void OnReadable(uv_poll_t* p, int status, int) {
    auto* self = static_cast<SoftDevice*>(p->data);
    if (status < 0 || !self->dev_) return;
    uint64_t v;
    while (read(self->dev_->segment().eventfd(), &v, sizeof v) > 0) {
    }
    self->events_.clear();
    self->dev_->onDoorbell(self->events_);
    self->Schedule();
    Napi::Env env = self->Env();
    Napi::HandleScope scope(env);
    // Copy: the callback may close the device.
    std::vector<std::pair<int, int>> events = self->events_;
    for (auto& [kind, handle] : events) {
      if (self->onEvent_.IsEmpty() || !self->Deliver(env, kind, handle)) break;
    }
  }

  bool Deliver(Napi::Env env, int kind, int handle) {
    return rdmajs::deliver_event(env, static_cast<napi_async_context>(*asyncContext_), Value(), onEvent_.Value(),
                                 kind, handle);
  }

  // An explicit close gives allocMr memory back at once: views are detached first.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Retire();
    dev_.reset();  // QPs go, then registrations are revoked: peers' copies end first
    for (auto& [h, o] : owned_) {
      Napi::ArrayBuffer ab = o.buffer.Value();
      if (!ab.IsDetached()) ab.Detach();
      unmap(o.mapping);
    }
    Shutdown();
    return info.Env().Undefined();
  }

  // ---- arguments: JS validates them; these checks keep a bug there (or a call from
  // elsewhere) from reaching memory as a wrong handle, a short array or a wild length.

  Napi::Value Fail(const Napi::CallbackInfo& info, int err, const std::string& why, const char* code) {
    system_error(info.Env(), kClassName, err, why.c_str(), code).ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }

  // Argument i as a handle of a live object of this device (has = hasQp/hasCq/hasSrq).
  bool HandleArg(const Napi::CallbackInfo& info, size_t i, bool (soft::Device::*has)(int) const, const char* what,
                 int* h) {
    if (!Alive(info)) return false;
    double d = Num(info, i);
    if (d >= 1 && d <= 2147483647.0 && d == std::floor(d) && ((*dev_).*has)(static_cast<int>(d))) {
      *h = static_cast<int>(d);
      return true;
    }
    Fail(info, EBADF, std::string("no such ") + what + " on this device", "ERR_RDMA_INVALID_ARG");
    return false;
  }
  bool QpArg(const Napi::CallbackInfo& info, size_t i, int* h) {
    return HandleArg(info, i, &soft::Device::hasQp, "queue pair", h);
  }
  bool CqArg(const Napi::CallbackInfo& info, size_t i, int* h) {
    return HandleArg(info, i, &soft::Device::hasCq, "completion queue", h);
  }
  bool SrqArg(const Napi::CallbackInfo& info, size_t i, int* h) {
    return HandleArg(info, i, &soft::Device::hasSrq, "shared receive queue", h);
  }

  // Argument i as a typed array of the given type: one napi_get_typedarray_info (these are
  // on the path of every post and poll), no exception for a wrong value (only ours).
  struct ArrayView {
    void* data = nullptr;
    size_t length = 0;  // elements
    size_t bytes = 0;
    double* f64() const { return static_cast<double*>(data); }
    uint8_t* u8() const { return static_cast<uint8_t*>(data); }
  };
  bool ArrayArg(const Napi::CallbackInfo& info, size_t i, napi_typedarray_type type, ArrayView* out) {
    napi_typedarray_type got;
    if (i < info.Length() &&
        napi_get_typedarray_info(info.Env(), info[i], &got, &out->length, &out->data, nullptr, nullptr) == napi_ok &&
        got == type) {
      out->bytes = out->length * (type == napi_float64_array ? 8 : 1);
      return true;
    }
    Fail(info, EINVAL, "argument " + std::to_string(i) + " must be a " +
                           (type == napi_float64_array ? "Float64Array" : "Uint8Array"),
         "ERR_RDMA_INVALID_ARG");
    return false;
  }

  static double Num(const Napi::CallbackInfo& info, size_t i) {
    double v = 0;
    if (i >= info.Length() || napi_get_value_double(info.Env(), info[i], &v) != napi_ok) return 0;  // not a number
    return v;
  }
  static uint32_t U32(const Napi::CallbackInfo& info, size_t i) { return soft::to_u32(Num(info, i)); }
  static int Count(const Napi::CallbackInfo& info, size_t i) {
    return static_cast<int>(std::min<uint32_t>(U32(info, i), 1u << 22));  // results carry index << 8
  }

  Napi::Value EndpointBase(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("pid", static_cast<double>(dev_->pid()));
    o.Set("segFd", dev_->segment().memfd());
    o.Set("bellFd", dev_->segment().eventfd());
    o.Set("bootId", std::string(dev_->segment().header()->bootId));
    o.Set("nonce", static_cast<double>(dev_->segment().header()->nonce));
    return o;
  }

  Napi::Value AllocMr(const Napi::CallbackInfo& info) {
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
    Napi::Array out = Napi::Array::New(env, 4);
    out.Set(0u, h);
    out.Set(1u, ab);
    out.Set(2u, static_cast<double>(reinterpret_cast<uint64_t>(p)));
    out.Set(3u, key);
    return out;
  }

  // The buffer is held (a strong reference) while registered: a peer may copy into it until
  // deregistration, so it must not be collected before (at worker exit, say).
  Napi::Value RegMr(const Napi::CallbackInfo& info) {
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
    Napi::Array out = Napi::Array::New(env, 3);
    out.Set(0u, h);
    out.Set(1u, static_cast<double>(addr));
    out.Set(2u, key);
    return out;
  }

  // Deregistration of allocMr memory gives it back at once (not at garbage collection):
  // its ArrayBuffer is detached first, so no JS view can reach the unmapped pages.
  // A peer still copying past the bound (stopped or dead mid-copy) leaves the memory
  // quarantined: detached from JS, but mapped (allocMr) or referenced (regMr) until its
  // pins drain, so the copy never lands in freed or reused memory. stats() counts it.
  Napi::Value DeregMr(const Napi::CallbackInfo& info) {
    int h = static_cast<int>(soft::to_u32(Num(info, 0)));
    ReleaseDrained();
    uint32_t slot = 0;
    bool quiet = dev_ ? dev_->deregMr(h, &slot) : true;
    auto it = owned_.find(h);
    if (it != owned_.end()) {
      Napi::ArrayBuffer ab = it->second.buffer.Value();
      if (!ab.IsDetached()) ab.Detach();
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

  // stats() → { quarantinedRegions, quarantinedBytes, quarantinedQueues, drainingQpSlots,
  // busyQps, retiredRegions, retiredBytes }: memory kept because a peer may still be inside
  // it, and QPs a peer is inside an operation on right now.
  Napi::Value Stats(const Napi::CallbackInfo& info) {
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
    auto* data = env.GetInstanceData<AddonData>();
    o.Set("retiredRegions", data ? static_cast<double>(data->retiredMappings.size() + data->retiredBuffers.size()) : 0.0);
    o.Set("retiredBytes", data ? static_cast<double>(data->retiredBytes) : 0.0);
    return o;
  }

  Napi::Value CreateCq(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    uint32_t capacity = U32(info, 0);
    if (capacity == 0 || capacity > soft::DeviceLimits::maxCqe)
      return Fail(info, EINVAL, "capacity must be in [1, maxCqe]", "ERR_RDMA_OUT_OF_RANGE");
    int h = dev_->createCq(capacity);
    if (h < 0) return (system_error(env, "ibv_create_cq", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroyCq(const Napi::CallbackInfo& info) {
    int h = static_cast<int>(soft::to_u32(Num(info, 0)));
    if (dev_ && dev_->destroyCq(h) == EBUSY)
      return Fail(info, EBUSY, "a queue pair still uses this completion queue", "ERR_RDMA_BUSY");
    return info.Env().Undefined();
  }

  Napi::Value CqCapacity(const Napi::CallbackInfo& info) {
    int h;
    if (!CqArg(info, 0, &h)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->cqCapacity(h));
  }

  Napi::Value PollCq(const Napi::CallbackInfo& info) {
    int h;
    ArrayView out;
    if (!CqArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &out)) return info.Env().Undefined();
    int max = static_cast<int>(std::min<size_t>(U32(info, 2), out.length / 8));  // never past `out`
    int n = dev_->pollCq(h, out.f64(), max);
    Schedule();
    return Napi::Number::New(info.Env(), n);
  }

  Napi::Value CqCount(const Napi::CallbackInfo& info) {
    int h;
    if (!CqArg(info, 0, &h)) return info.Env().Undefined();
    uint32_t n = dev_->cqCount(h);
    Schedule();
    return Napi::Number::New(info.Env(), n);
  }

  Napi::Value ArmCq(const Napi::CallbackInfo& info) {
    int h;
    if (!CqArg(info, 0, &h)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->armCq(h));
  }

  Napi::Value CreateSrq(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    uint32_t maxWr = U32(info, 0), maxSge = U32(info, 1);
    if (maxWr == 0 || maxWr > soft::DeviceLimits::maxSrqWr || maxSge == 0 || maxSge > soft::DeviceLimits::maxSge)
      return Fail(info, EINVAL, "maxWr/maxSge out of the device's range", "ERR_RDMA_OUT_OF_RANGE");
    int h = dev_->createSrq(maxWr, maxSge);
    if (h < 0) return (system_error(env, "ibv_create_srq", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroySrq(const Napi::CallbackInfo& info) {
    int h = static_cast<int>(soft::to_u32(Num(info, 0)));
    if (dev_ && dev_->destroySrq(h) == EBUSY)
      return Fail(info, EBUSY, "a queue pair still uses this shared receive queue", "ERR_RDMA_BUSY");
    return info.Env().Undefined();
  }

  Napi::Value PostSrqRecv(const Napi::CallbackInfo& info) {
    int h;
    ArrayView wrs;
    if (!SrqArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &wrs)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->postSrqRecv(h, wrs.f64(), wrs.length, Count(info, 2)));
  }

  Napi::Value ArmSrqLimit(const Napi::CallbackInfo& info) {
    int h;
    if (!SrqArg(info, 0, &h)) return info.Env().Undefined();
    dev_->armSrqLimit(h, U32(info, 1));
    return info.Env().Undefined();
  }

  Napi::Value CreateQp(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    int sendCq, recvCq, srq = -1;
    if (!CqArg(info, 0, &sendCq) || !CqArg(info, 1, &recvCq)) return env.Undefined();
    if (!(info[2].IsNumber() && Num(info, 2) < 0) && !SrqArg(info, 2, &srq)) return env.Undefined();
    using L = soft::DeviceLimits;
    uint32_t sendWr = U32(info, 3), recvWr = U32(info, 4), sendSge = U32(info, 5), recvSge = U32(info, 6),
             inl = U32(info, 7);
    if (sendWr == 0 || sendWr > L::maxQpWr || recvWr > L::maxQpWr || (srq < 0 && recvWr == 0) || sendSge == 0 ||
        sendSge > L::maxSge || recvSge == 0 || recvSge > L::maxSge || inl > L::maxInline)
      return Fail(info, EINVAL, "queue pair capabilities out of the device's range", "ERR_RDMA_OUT_OF_RANGE");
    int h = dev_->createQp(sendCq, recvCq, srq, sendWr, recvWr, sendSge, recvSge, inl);
    if (h < 0) return (system_error(env, "ibv_create_qp", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroyQp(const Napi::CallbackInfo& info) {
    int h = static_cast<int>(soft::to_u32(Num(info, 0)));
    if (dev_) dev_->destroyQp(h);
    return info.Env().Undefined();
  }

  Napi::Value QpInfo(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    int h;
    if (!QpArg(info, 0, &h)) return env.Undefined();
    Napi::Array out = Napi::Array::New(env, 3);
    out.Set(0u, dev_->qpNum(h));
    out.Set(1u, dev_->qpSlot(h));
    out.Set(2u, dev_->qpGen(h));
    return out;
  }

  Napi::Value QpState(const Napi::CallbackInfo& info) {
    int h;
    if (!QpArg(info, 0, &h)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->qpState(h));
  }

  // modifyQp(h, state, ...): 'init' (access), 'rtr' (pid, segFd, bellFd, slot, gen, qpn,
  // minRnrTimer), 'rts' (timeout, retryCount, rnrRetry), 'error', 'reset'. Returns errno.
  Napi::Value ModifyQp(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    int h;
    if (!QpArg(info, 0, &h)) return env.Undefined();
    auto u = [&](size_t i) { return U32(info, i); };
    uint32_t to = u(1);
    int rc = EINVAL;
    switch (to) {
      case soft::QPS_INIT: rc = dev_->toInit(h, u(2)); break;
      case soft::QPS_RTR: {
        const soft::SysError* se = nullptr;
        uint64_t nonce = soft::to_u64(Num(info, 9));
        rc = dev_->toRtr(h, static_cast<pid_t>(u(2)), static_cast<int>(u(3)), static_cast<int>(u(4)), nonce, u(5), u(6),
                         u(7), std::min<uint32_t>(u(8), 31), &se);
        if (se) return RtrError(info, *se);
        break;
      }
      case soft::QPS_RTS: rc = dev_->toRts(h, std::min<uint32_t>(u(2), 31), std::min<uint32_t>(u(3), 7), std::min<uint32_t>(u(4), 7)); break;
      case soft::QPS_ERR: rc = dev_->toErr(h); break;
      case soft::QPS_RESET: rc = dev_->toReset(h); break;
      default: break;
    }
    return Napi::Number::New(env, rc);
  }

  // A peer that cannot be reached at connect time: EPERM from pidfd_getfd is the kernel's
  // ptrace access check (Yama ptrace_scope, another user, a no-new-privileges sandbox).
  Napi::Value RtrError(const Napi::CallbackInfo& info, const soft::SysError& se) {
    if (se.err == EPERM || se.err == ESRCH || se.err == ESTALE) {
      const char* why =
          se.err == EPERM
              ? "the peer process does not let this one take its file descriptors (ptrace access check: Yama "
                "ptrace_scope, a different user or a sandbox); run both under one user with ptrace_scope 0/1 "
                "(the soft provider sets PR_SET_PTRACER), or use the TCP link (openDevice({ link: 'tcp' }))"
              : se.err == ESRCH ? "the peer process is gone" : "the endpoint names a device that no longer exists";
      system_error(info.Env(), se.syscall, se.err, why, "ERR_RDMA_UNREACHABLE").ThrowAsJavaScriptException();
    } else {
      system_error(info.Env(), se.syscall, se.err).ThrowAsJavaScriptException();
    }
    return info.Env().Undefined();
  }

  Napi::Value PostSend(const Napi::CallbackInfo& info) {
    int h;
    ArrayView wrs;
    if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &wrs)) return info.Env().Undefined();
    int rc = dev_->postSend(h, wrs.f64(), wrs.length, Count(info, 2));
    Schedule();
    return Napi::Number::New(info.Env(), rc);
  }

  Napi::Value PostRecv(const Napi::CallbackInfo& info) {
    int h;
    ArrayView wrs;
    if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &wrs)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->postRecv(h, wrs.f64(), wrs.length, Count(info, 2)));
  }

  // inject(h, kind, value): 0 break link, 1 stall receiver (value 0/1), 2 delay (ms),
  // 3 hold the peer's receive-queue lock for good (a process stopped inside it), 4/5 take /
  // drop a pin on the peer's MR named by rkey `value` (a copy that does not end), 6 the
  // next operation stops `value` ms inside deliver() (a slow initiator mid-operation).
  Napi::Value Inject(const Napi::CallbackInfo& info) {
    int h;
    if (!QpArg(info, 0, &h)) return info.Env().Undefined();
    uint32_t kind = U32(info, 1);
    double v = Num(info, 2);
    if (kind == 0) dev_->injectBreakLink(h);
    if (kind == 1) dev_->injectStall(h, v != 0);
    if (kind == 2) dev_->injectDelay(h, std::isfinite(v) && v > 0 ? v : 0);
    if (kind == 3) dev_->injectHoldPeerLock(h);
    if (kind == 4 || kind == 5) dev_->injectPeerPin(h, soft::to_u32(v), kind == 4);
    if (kind == 6) dev_->injectPauseInDeliver(h, std::isfinite(v) && v > 0 ? std::min(v, 10000.0) : 0);
    return info.Env().Undefined();
  }

  // ---- TCP link (the sockets live in JS; these move WRs and answers across)

  // toRtrLink(h, peerPid, peerSlot, peerGen, peerQpn, minRnrTimer) → errno
  Napi::Value ToRtrLink(const Napi::CallbackInfo& info) {
    int h;
    if (!QpArg(info, 0, &h)) return info.Env().Undefined();
    auto u = [&](size_t i) { return U32(info, i); };
    return Napi::Number::New(info.Env(), dev_->toRtrLink(h, u(1), u(2), u(3), u(4), std::min<uint32_t>(u(5), 31)));
  }

  // linkTake(h, hdr: Float64Array(10), payload: Uint8Array) → 1 taken, 0 none, -n: need n bytes
  Napi::Value LinkTake(const Napi::CallbackInfo& info) {
    int h;
    ArrayView hdr;
    ArrayView payload;
    if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &hdr) ||
        !ArrayArg(info, 2, napi_uint8_array, &payload))
      return info.Env().Undefined();
    if (hdr.length < 10) return Napi::Number::New(info.Env(), 0);
    double r = dev_->linkTake(h, hdr.f64(), payload.u8(), payload.bytes);
    Schedule();
    return Napi::Number::New(info.Env(), r);
  }

  // linkDone(h, token, outcome, status, rnrTimer, data?: Uint8Array)
  Napi::Value LinkDone(const Napi::CallbackInfo& info) {
    int h;
    if (!QpArg(info, 0, &h)) return info.Env().Undefined();
    const uint8_t* data = nullptr;
    size_t len = 0;
    if (info[5].IsTypedArray()) {
      ArrayView d;
      if (!ArrayArg(info, 5, napi_uint8_array, &d)) return info.Env().Undefined();
      data = d.u8();
      len = d.bytes;
    }
    auto u = [&](size_t i) { return U32(info, i); };
    dev_->linkDone(h, u(1), static_cast<int>(std::min<uint32_t>(u(2), 255)), static_cast<uint8_t>(std::min<uint32_t>(u(3), 255)),
                   std::min<uint32_t>(u(4), 31), data, len);
    Schedule();
    return info.Env().Undefined();
  }

  // respond(slot, gen, opcode, payload: Uint8Array, imm, remoteAddr, rkey, srcQpn, srcPid)
  //   → (rnrTimer << 16) | (outcome << 8) | status. For READ, `payload` receives the data.
  Napi::Value Respond(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    ArrayView payload;
    if (!ArrayArg(info, 3, napi_uint8_array, &payload)) return info.Env().Undefined();
    auto u = [&](size_t i) { return U32(info, i); };
    uint32_t rnr = 12;
    int r = dev_->respond(u(0), u(1), static_cast<uint8_t>(std::min<uint32_t>(u(2), 255)), payload.u8(),
                          payload.bytes, u(4), soft::to_u64(Num(info, 5)), u(6), u(7), u(8), &rnr);
    return Napi::Number::New(info.Env(), static_cast<double>(((rnr & 31) << 16) | static_cast<uint32_t>(r)));
  }

  std::unique_ptr<soft::Device> dev_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
  Napi::FunctionReference onEvent_;
  uv_poll_t* poll_ = nullptr;
  uv_timer_t* timer_ = nullptr;
  napi_env env_ = nullptr;
  bool hookAdded_ = false;
  std::vector<std::pair<int, int>> events_;
  struct OwnedMemory {
    Napi::Reference<Napi::ArrayBuffer> buffer;
    Mapping* mapping;
  };
  std::map<int, OwnedMemory> owned_;  // allocMr memory by MR handle, until deregistered
  struct HeldBuffer {
    Napi::Reference<Napi::ArrayBuffer> ref;
    uint64_t length;
  };
  std::map<int, HeldBuffer> held_;  // regMr buffers, until deregistered
  struct Held {
    uint32_t slot;                               // the MR slot whose pins it waits for
    Mapping* mapping;                            // allocMr memory, kept mapped
    Napi::Reference<Napi::ArrayBuffer> buffer;   // regMr memory, kept referenced
    uint64_t bytes;
  };
  std::vector<Held> quarantine_;
};

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  auto* data = info.Env().GetInstanceData<AddonData>();
  if (!data || !info[0].IsFunction()) {
    Napi::TypeError::New(info.Env(), "setErrorClass takes the RdmaSystemError class").ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }
  data->systemError = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

Napi::Value SoftLimits(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  using L = soft::DeviceLimits;
  Napi::Object o = Napi::Object::New(env);
  o.Set("maxQp", soft::kQpSlots);
  o.Set("maxQpWr", L::maxQpWr);
  o.Set("maxSge", L::maxSge);
  o.Set("maxCqe", L::maxCqe);
  o.Set("maxMr", soft::kMrSlots - 1);
  o.Set("maxMrSize", Napi::BigInt::New(info.Env(), static_cast<uint64_t>(L::maxMrSize)));  // 64-bit: exact
  o.Set("maxMsgSize", static_cast<double>(L::maxMsg));
  o.Set("maxInlineData", L::maxInline);
  o.Set("maxSrqWr", L::maxSrqWr);
  o.Set("bootId", soft::boot_id());
  return o;
}

// The soft engine's own names must be the contract's numbers.
static_assert(soft::EV_DOORBELL == abi::EV_DOORBELL && soft::EV_QP_FATAL == abi::EV_QP_FATAL &&
              soft::EV_CQ_ERR == abi::EV_CQ_ERR && soft::EV_SRQ_LIMIT == abi::EV_SRQ_LIMIT &&
              soft::EV_LINK == abi::EV_LINK);
static_assert(soft::POST_EINVAL == abi::POST_EINVAL && soft::POST_ENOMEM == abi::POST_ENOMEM &&
              soft::POST_BAD_INLINE == abi::POST_BAD_INLINE && soft::POST_BUSY == abi::POST_BUSY);
static_assert(soft::QPS_RESET == abi::QPS_RESET && soft::QPS_INIT == abi::QPS_INIT && soft::QPS_RTR == abi::QPS_RTR &&
              soft::QPS_RTS == abi::QPS_RTS && soft::QPS_ERR == abi::QPS_ERR);
static_assert(soft::OPC_SEND == abi::WCO_SEND && soft::OPC_RDMA_WRITE == abi::WCO_RDMA_WRITE &&
              soft::OPC_RDMA_READ == abi::WCO_RDMA_READ && soft::OPC_RECV == abi::WCO_RECV &&
              soft::OPC_RECV_RDMA_WITH_IMM == abi::WCO_RECV_RDMA_WITH_IMM && soft::WCF_WITH_IMM == abi::WC_FLAG_WITH_IMM);

// abi(): the contract's table, which the loader checks against src/internal/abi.ts.
Napi::Value AbiTable(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  for (const auto& e : abi::kTable) o.Set(e.name, e.value);
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonData());
  exports.Set("SoftDevice", SoftDevice::Define(env));
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass));
  exports.Set("softLimits", Napi::Function::New(env, SoftLimits));
  exports.Set("abi", Napi::Function::New(env, AbiTable));
  rdmajs::register_ibverbs(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(rdmajs_verbs, Init)

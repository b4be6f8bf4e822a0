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

#include "addon.h"
#include "soft/device.h"

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

class SoftDevice : public Napi::ObjectWrap<SoftDevice> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "SoftDevice",
                       {
                           InstanceMethod<&SoftDevice::Close>("close"),
                           InstanceMethod<&SoftDevice::EndpointBase>("endpointBase"),
                           InstanceMethod<&SoftDevice::AllocMr>("allocMr"),
                           InstanceMethod<&SoftDevice::RegMr>("regMr"),
                           InstanceMethod<&SoftDevice::DeregMr>("deregMr"),
                           InstanceMethod<&SoftDevice::CreateCq>("createCq"),
                           InstanceMethod<&SoftDevice::DestroyCq>("destroyCq"),
                           InstanceMethod<&SoftDevice::CqCapacity>("cqCapacity"),
                           InstanceMethod<&SoftDevice::PollCq>("pollCq"),
                           InstanceMethod<&SoftDevice::CqCount>("cqCount"),
                           InstanceMethod<&SoftDevice::ArmCq>("armCq"),
                           InstanceMethod<&SoftDevice::CreateSrq>("createSrq"),
                           InstanceMethod<&SoftDevice::DestroySrq>("destroySrq"),
                           InstanceMethod<&SoftDevice::PostSrqRecv>("postSrqRecv"),
                           InstanceMethod<&SoftDevice::ArmSrqLimit>("armSrqLimit"),
                           InstanceMethod<&SoftDevice::CreateQp>("createQp"),
                           InstanceMethod<&SoftDevice::DestroyQp>("destroyQp"),
                           InstanceMethod<&SoftDevice::QpInfo>("qpInfo"),
                           InstanceMethod<&SoftDevice::QpState>("qpState"),
                           InstanceMethod<&SoftDevice::ModifyQp>("modifyQp"),
                           InstanceMethod<&SoftDevice::PostSend>("postSend"),
                           InstanceMethod<&SoftDevice::PostRecv>("postRecv"),
                           InstanceMethod<&SoftDevice::Inject>("inject"),
                           InstanceMethod<&SoftDevice::ToRtrLink>("toRtrLink"),
                           InstanceMethod<&SoftDevice::LinkTake>("linkTake"),
                           InstanceMethod<&SoftDevice::LinkDone>("linkDone"),
                           InstanceMethod<&SoftDevice::Respond>("respond"),
                       });
  }

  explicit SoftDevice(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SoftDevice>(info) {
    Napi::Env env = info.Env();
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

  ~SoftDevice() override { Shutdown(); }

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
    dev_.reset();  // revokes every registration, waiting for peers' copies
    for (auto& [h, o] : owned_) on_unregistered(o.mapping);
    owned_.clear();
    if (hookAdded_) {
      napi_remove_env_cleanup_hook(env_, &SoftDevice::Cleanup, this);
      hookAdded_ = false;
    }
  }

  bool Alive(const Napi::CallbackInfo& info) {
    if (dev_) return true;
    Napi::Error::New(info.Env(), "device is closed").ThrowAsJavaScriptException();
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
    dev_.reset();  // QPs go, then registrations are revoked: peers' copies end first
    for (auto& [h, o] : owned_) {
      Napi::ArrayBuffer ab = o.buffer.Value();
      if (!ab.IsDetached()) ab.Detach();
      unmap(o.mapping);
    }
    Shutdown();
    return info.Env().Undefined();
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
    size_t length = static_cast<size_t>(info[0].As<Napi::Number>().DoubleValue());
    uint32_t access = info[1].As<Napi::Number>().Uint32Value();
    int fd = static_cast<int>(syscall(SYS_memfd_create, "rdmajs-mr", MFD_CLOEXEC));
    if (fd < 0) return (system_error(env, "memfd_create", errno).ThrowAsJavaScriptException(), env.Undefined());
    if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
      int e = errno;
      close(fd);
      return (system_error(env, "ftruncate", e).ThrowAsJavaScriptException(), env.Undefined());
    }
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

  Napi::Value RegMr(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
    size_t offset = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
    size_t length = static_cast<size_t>(info[2].As<Napi::Number>().DoubleValue());
    uint32_t access = info[3].As<Napi::Number>().Uint32Value();
    uint64_t addr = reinterpret_cast<uint64_t>(static_cast<uint8_t*>(ab.Data()) + offset);
    uint32_t key = 0;
    int h = dev_->regMr(addr, length, access, -1, &key);
    if (h < 0) return (system_error(env, "ibv_reg_mr", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
    Napi::Array out = Napi::Array::New(env, 3);
    out.Set(0u, h);
    out.Set(1u, static_cast<double>(addr));
    out.Set(2u, key);
    return out;
  }

  // Deregistration of allocMr memory gives it back at once (not at garbage collection):
  // its ArrayBuffer is detached first, so no JS view can reach the unmapped pages.
  Napi::Value DeregMr(const Napi::CallbackInfo& info) {
    int h = info[0].As<Napi::Number>().Int32Value();
    if (dev_) dev_->deregMr(h);
    auto it = owned_.find(h);
    if (it != owned_.end()) {
      Napi::ArrayBuffer ab = it->second.buffer.Value();
      if (!ab.IsDetached()) ab.Detach();
      unmap(it->second.mapping);
      on_unregistered(it->second.mapping);
      owned_.erase(it);
    }
    return info.Env().Undefined();
  }

  Napi::Value CreateCq(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    int h = dev_->createCq(info[0].As<Napi::Number>().Uint32Value());
    if (h < 0) return (system_error(env, "ibv_create_cq", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroyCq(const Napi::CallbackInfo& info) {
    if (dev_) dev_->destroyCq(info[0].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  Napi::Value CqCapacity(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->cqCapacity(info[0].As<Napi::Number>().Int32Value()));
  }

  Napi::Value PollCq(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    int h = info[0].As<Napi::Number>().Int32Value();
    Napi::Float64Array out = info[1].As<Napi::Float64Array>();
    int max = info[2].As<Napi::Number>().Int32Value();
    max = std::max(0, std::min(max, static_cast<int>(out.ElementLength() / 8)));  // never past `out`
    int n = dev_->pollCq(h, out.Data(), max);
    Schedule();
    return Napi::Number::New(info.Env(), n);
  }

  Napi::Value CqCount(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    uint32_t n = dev_->cqCount(info[0].As<Napi::Number>().Int32Value());
    Schedule();
    return Napi::Number::New(info.Env(), n);
  }

  Napi::Value ArmCq(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->armCq(info[0].As<Napi::Number>().Int32Value()));
  }

  Napi::Value CreateSrq(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    int h = dev_->createSrq(info[0].As<Napi::Number>().Uint32Value(), info[1].As<Napi::Number>().Uint32Value());
    if (h < 0) return (system_error(env, "ibv_create_srq", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroySrq(const Napi::CallbackInfo& info) {
    if (dev_) dev_->destroySrq(info[0].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  Napi::Value PostSrqRecv(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    int h = info[0].As<Napi::Number>().Int32Value();
    Napi::Float64Array wrs = info[1].As<Napi::Float64Array>();
    return Napi::Number::New(info.Env(), dev_->postSrqRecv(h, wrs.Data(), info[2].As<Napi::Number>().Int32Value()));
  }

  Napi::Value ArmSrqLimit(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    dev_->armSrqLimit(info[0].As<Napi::Number>().Int32Value(), info[1].As<Napi::Number>().Uint32Value());
    return info.Env().Undefined();
  }

  Napi::Value CreateQp(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    auto n = [&](int i) { return info[i].As<Napi::Number>().Int32Value(); };
    int h = dev_->createQp(n(0), n(1), n(2), n(3), n(4), n(5), n(6), n(7));
    if (h < 0) return (system_error(env, "ibv_create_qp", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroyQp(const Napi::CallbackInfo& info) {
    if (dev_) dev_->destroyQp(info[0].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  Napi::Value QpInfo(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    int h = info[0].As<Napi::Number>().Int32Value();
    Napi::Array out = Napi::Array::New(env, 3);
    out.Set(0u, dev_->qpNum(h));
    out.Set(1u, dev_->qpSlot(h));
    out.Set(2u, dev_->qpGen(h));
    return out;
  }

  Napi::Value QpState(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    return Napi::Number::New(info.Env(), dev_->qpState(info[0].As<Napi::Number>().Int32Value()));
  }

  // modifyQp(h, state, ...): 'init' (access), 'rtr' (pid, segFd, bellFd, slot, gen, qpn,
  // minRnrTimer), 'rts' (timeout, retryCount, rnrRetry), 'error', 'reset'. Returns errno.
  Napi::Value ModifyQp(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    auto u = [&](int i) { return info[i].As<Napi::Number>().Uint32Value(); };
    int h = info[0].As<Napi::Number>().Int32Value();
    uint32_t to = u(1);
    int rc = EINVAL;
    switch (to) {
      case soft::QPS_INIT: rc = dev_->toInit(h, u(2)); break;
      case soft::QPS_RTR: {
        const soft::SysError* se = nullptr;
        uint64_t nonce = static_cast<uint64_t>(info[9].As<Napi::Number>().DoubleValue());
        rc = dev_->toRtr(h, static_cast<pid_t>(u(2)), static_cast<int>(u(3)), static_cast<int>(u(4)), nonce, u(5), u(6),
                         u(7), u(8), &se);
        if (se) return (system_error(env, se->syscall, se->err).ThrowAsJavaScriptException(), env.Undefined());
        break;
      }
      case soft::QPS_RTS: rc = dev_->toRts(h, u(2), u(3), u(4)); break;
      case soft::QPS_ERR: rc = dev_->toErr(h); break;
      case soft::QPS_RESET: rc = dev_->toReset(h); break;
      default: break;
    }
    return Napi::Number::New(env, rc);
  }

  Napi::Value PostSend(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    int h = info[0].As<Napi::Number>().Int32Value();
    Napi::Float64Array wrs = info[1].As<Napi::Float64Array>();
    int rc = dev_->postSend(h, wrs.Data(), info[2].As<Napi::Number>().Int32Value());
    Schedule();
    return Napi::Number::New(info.Env(), rc);
  }

  Napi::Value PostRecv(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    int h = info[0].As<Napi::Number>().Int32Value();
    Napi::Float64Array wrs = info[1].As<Napi::Float64Array>();
    return Napi::Number::New(info.Env(), dev_->postRecv(h, wrs.Data(), info[2].As<Napi::Number>().Int32Value()));
  }

  // inject(h, kind, value): 0 break link, 1 stall receiver (value 0/1), 2 delay (ms).
  Napi::Value Inject(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    int h = info[0].As<Napi::Number>().Int32Value();
    int kind = info[1].As<Napi::Number>().Int32Value();
    double v = info[2].As<Napi::Number>().DoubleValue();
    if (kind == 0) dev_->injectBreakLink(h);
    if (kind == 1) dev_->injectStall(h, v != 0);
    if (kind == 2) dev_->injectDelay(h, v);
    return info.Env().Undefined();
  }

  // ---- TCP link (the sockets live in JS; these move WRs and answers across)

  // toRtrLink(h, peerPid, peerSlot, peerGen, peerQpn, minRnrTimer) → errno
  Napi::Value ToRtrLink(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    auto u = [&](int i) { return info[i].As<Napi::Number>().Uint32Value(); };
    return Napi::Number::New(info.Env(), dev_->toRtrLink(info[0].As<Napi::Number>().Int32Value(), u(1), u(2), u(3), u(4), u(5)));
  }

  // linkTake(h, hdr: Float64Array(10), payload: Uint8Array) → 1 taken, 0 none, -n: need n bytes
  Napi::Value LinkTake(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    Napi::Float64Array hdr = info[1].As<Napi::Float64Array>();
    Napi::Uint8Array payload = info[2].As<Napi::Uint8Array>();
    if (hdr.ElementLength() < 10) return Napi::Number::New(info.Env(), 0);
    double r = dev_->linkTake(info[0].As<Napi::Number>().Int32Value(), hdr.Data(), payload.Data(), payload.ByteLength());
    Schedule();
    return Napi::Number::New(info.Env(), r);
  }

  // linkDone(h, token, outcome, status, rnrTimer, data?: Uint8Array)
  Napi::Value LinkDone(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    const uint8_t* data = nullptr;
    size_t len = 0;
    if (info[5].IsTypedArray()) {
      Napi::Uint8Array d = info[5].As<Napi::Uint8Array>();
      data = d.Data();
      len = d.ByteLength();
    }
    auto u = [&](int i) { return info[i].As<Napi::Number>().Uint32Value(); };
    dev_->linkDone(info[0].As<Napi::Number>().Int32Value(), u(1), static_cast<int>(u(2)), static_cast<uint8_t>(u(3)), u(4),
                   data, len);
    Schedule();
    return info.Env().Undefined();
  }

  // respond(slot, gen, opcode, payload: Uint8Array, imm, remoteAddr, rkey, srcQpn, srcPid)
  //   → (rnrTimer << 16) | (outcome << 8) | status. For READ, `payload` receives the data.
  Napi::Value Respond(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    auto u = [&](int i) { return info[i].As<Napi::Number>().Uint32Value(); };
    Napi::Uint8Array payload = info[3].As<Napi::Uint8Array>();
    uint32_t rnr = 12;
    int r = dev_->respond(u(0), u(1), static_cast<uint8_t>(u(2)), payload.Data(), payload.ByteLength(), u(4),
                          static_cast<uint64_t>(info[5].As<Napi::Number>().DoubleValue()), u(6), u(7), u(8), &rnr);
    return Napi::Number::New(info.Env(), static_cast<double>((rnr << 16) | static_cast<uint32_t>(r)));
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
};

Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  auto* data = info.Env().GetInstanceData<AddonData>();
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
  o.Set("maxMrSize", static_cast<double>(L::maxMrSize));
  o.Set("maxMsgSize", static_cast<double>(L::maxMsg));
  o.Set("maxInlineData", L::maxInline);
  o.Set("maxSrqWr", L::maxSrqWr);
  o.Set("bootId", soft::boot_id());
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new AddonData());
  exports.Set("SoftDevice", SoftDevice::Define(env));
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass));
  exports.Set("softLimits", Napi::Function::New(env, SoftLimits));
  rdmajs::register_ibverbs(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(rdmajs_verbs, Init)

// Node-API adapter of the ibverbs provider: the same handle-based surface as the soft
// provider (see src/internal/native.ts), on libibverbs. JS validates, C++ trusts.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "../abi.h"
#include "../addon.h"
#include "../tagged.h"
#include "api.h"
#include "discovery.h"

namespace rdmajs {
namespace {

using ibv::Api;

// The numbers shared with JS are the contract's (native/abi.h).
using abi::EV_CQ_ERR, abi::EV_DOORBELL, abi::EV_PORT, abi::EV_QP_FATAL, abi::EV_SRQ_LIMIT;
using abi::FLAG_INLINE, abi::FLAG_SIGNALED;
using abi::POST_BAD_INLINE, abi::POST_EINVAL, abi::POST_ENOMEM, abi::POST_OTHER;
using abi::QPS_ERR, abi::QPS_INIT, abi::QPS_RESET, abi::QPS_RTR, abi::QPS_RTS;

int set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void* tag(int h) { return reinterpret_cast<void*>(static_cast<intptr_t>(h)); }
int untag(void* p) { return static_cast<int>(reinterpret_cast<intptr_t>(p)); }


class IbvDevice : public Napi::ObjectWrap<IbvDevice> {
 public:
  static constexpr napi_type_tag kTypeTag = {0x7264'6d61'6a73'0002ull, 0x6962'7665'7262'7331ull};
  static constexpr const char* kClassName = "IbvDevice";

  static Napi::Function Define(Napi::Env env) {
    using T = Tagged<IbvDevice>;
    return T::Class(env, kClassName,
                       {
                           T::Def<&IbvDevice::Close>(env, "close"),
                           T::Def<&IbvDevice::RouteInfo>(env, "routeInfo"),
                           T::Def<&IbvDevice::AllocMr>(env, "allocMr"),
                           T::Def<&IbvDevice::RegMr>(env, "regMr"),
                           T::Def<&IbvDevice::DeregMr>(env, "deregMr"),
                           T::Def<&IbvDevice::CreateCq>(env, "createCq"),
                           T::Def<&IbvDevice::DestroyCq>(env, "destroyCq"),
                           T::Def<&IbvDevice::CqCapacity>(env, "cqCapacity"),
                           T::Def<&IbvDevice::PollCq>(env, "pollCq"),
                           T::Def<&IbvDevice::CqCount>(env, "cqCount"),
                           T::Def<&IbvDevice::ArmCq>(env, "armCq"),
                           T::Def<&IbvDevice::CreateSrq>(env, "createSrq"),
                           T::Def<&IbvDevice::DestroySrq>(env, "destroySrq"),
                           T::Def<&IbvDevice::PostSrqRecv>(env, "postSrqRecv"),
                           T::Def<&IbvDevice::ArmSrqLimit>(env, "armSrqLimit"),
                           T::Def<&IbvDevice::CreateQp>(env, "createQp"),
                           T::Def<&IbvDevice::DestroyQp>(env, "destroyQp"),
                           T::Def<&IbvDevice::QpInfo>(env, "qpInfo"),
                           T::Def<&IbvDevice::QpState>(env, "qpState"),
                           T::Def<&IbvDevice::ModifyQp>(env, "modifyQp"),
                           T::Def<&IbvDevice::PostSend>(env, "postSend"),
                           T::Def<&IbvDevice::PostRecv>(env, "postRecv"),
                       });
  }

  // new IbvDevice(name, onEvent)
  explicit IbvDevice(const Napi::CallbackInfo& info) : Napi::ObjectWrap<IbvDevice>(info) {
    Napi::Env env = info.Env();
    Tagged<IbvDevice>::Adopt(this, info.This().As<Napi::Object>());
    if (!info[0].IsString() || !info[1].IsFunction()) {
      system_error(env, kClassName, EINVAL, "new IbvDevice(name, onEvent)", "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException();
      return;
    }
    std::string want = info[0].As<Napi::String>().Utf8Value();
    onEvent_ = Napi::Persistent(info[1].As<Napi::Function>());
    std::string why;
    api_ = ibv::load(&why);
    if (!api_) {
      Napi::Error::New(env, why).ThrowAsJavaScriptException();
      return;
    }
    int n = 0;
    ibv_device** list = api_->get_device_list(&n);
    if (!list) {
      system_error(env, "ibv_get_device_list", errno).ThrowAsJavaScriptException();
      return;
    }
    for (int i = 0; i < n && !ctx_; i++) {
      if (want == api_->get_device_name(list[i])) {
        ctx_ = api_->open_device(list[i]);
        if (!ctx_) {
          int e = errno;
          api_->free_device_list(list);
          system_error(env, "ibv_open_device", e).ThrowAsJavaScriptException();
          return;
        }
        guid_ = api_->get_device_guid(list[i]);
      }
    }
    api_->free_device_list(list);
    if (!ctx_) {
      Napi::Error::New(env, "no ibverbs device named " + want).ThrowAsJavaScriptException();
      return;
    }
    if (!ibv::describe(*api_, ctx_, want, guid_, &view_, &why) || !ibv::choose_route(view_, &route_, &why)) {
      Teardown();
      Napi::Error::New(env, why).ThrowAsJavaScriptException();
      return;
    }
    pd_ = api_->alloc_pd(ctx_);
    channel_ = pd_ ? api_->create_comp_channel(ctx_) : nullptr;
    if (!pd_ || !channel_) {
      int e = errno;
      Teardown();
      system_error(env, pd_ ? "ibv_create_comp_channel" : "ibv_alloc_pd", e).ThrowAsJavaScriptException();
      return;
    }
    set_nonblocking(channel_->fd);
    set_nonblocking(ctx_->async_fd);
    psnRng_.seed(std::random_device{}());
    asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "rdmajs:ibverbs-device");
    uv_loop_t* loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    compPoll_ = StartPoll(loop, channel_->fd, &IbvDevice::OnCompletionEvent);
    asyncPoll_ = StartPoll(loop, ctx_->async_fd, &IbvDevice::OnAsyncEvent);
    env_ = env;
    napi_add_env_cleanup_hook(env, &IbvDevice::Cleanup, this);
    hookAdded_ = true;
  }

  ~IbvDevice() override {
    Tagged<IbvDevice>::Release(this);
    Teardown();
  }

 private:
  struct Mr {
    ibv_mr* mr;
    Mapping* mapping;  // allocMr only
    Napi::Reference<Napi::ArrayBuffer> buffer;
  };
  struct Cq {
    ibv_cq* cq;
    std::vector<ibv_wc> staged;  // polled for cqCount()/armCq() but not yet handed to JS
    size_t head = 0;
    unsigned unacked = 0;
  };
  struct Qp {
    ibv_qp* qp;
    uint32_t psn;
    int state;  // as last set by the application: posts are checked against it
    ibv_qp_cap cap;  // what the device granted (often more than asked: rxe rounds rings up)
    uint32_t maxSendSge, maxRecvSge;  // what JS packs with
  };
  struct Srq {
    ibv_srq* srq;
    uint32_t maxWr, maxSge;
  };

  uv_poll_t* StartPoll(uv_loop_t* loop, int fd, uv_poll_cb cb) {
    auto* p = new uv_poll_t;
    p->data = this;
    uv_poll_init(loop, p, fd);
    uv_poll_start(p, UV_READABLE, cb);
    uv_unref(reinterpret_cast<uv_handle_t*>(p));  // an idle device keeps no process alive
    return p;
  }

  static void StopPoll(uv_poll_t*& p) {
    if (!p) return;
    uv_poll_stop(p);
    uv_close(reinterpret_cast<uv_handle_t*>(p), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
    p = nullptr;
  }

  static void Cleanup(void* self) {
    auto* d = static_cast<IbvDevice*>(self);
    d->hookAdded_ = false;
    d->Teardown();
  }

  // Destroys in the order verbs require: QPs, SRQs, CQs (after acking their events), MRs,
  // then the PD, the channel and the context.
  void Teardown() {
    StopPoll(compPoll_);
    StopPoll(asyncPoll_);
    if (api_) {
      for (auto& [h, q] : qps_) api_->destroy_qp(q.qp);
      qps_.clear();
      for (auto& [h, s] : srqs_) api_->destroy_srq(s.srq);
      srqs_.clear();
      for (auto& [h, c] : cqs_) {
        if (c.unacked) api_->ack_cq_events(c.cq, c.unacked);
        c.unacked = 0;
        api_->destroy_cq(c.cq);
      }
      cqs_.clear();
      for (auto& [h, m] : mrs_) {
        api_->dereg_mr(m.mr);
        if (m.mapping) on_unregistered(m.mapping);
      }
      mrs_.clear();
      if (pd_) api_->dealloc_pd(pd_);
      if (channel_) api_->destroy_comp_channel(channel_);
      if (ctx_) api_->close_device(ctx_);
    }
    pd_ = nullptr;
    channel_ = nullptr;
    ctx_ = nullptr;
    if (hookAdded_) {
      napi_remove_env_cleanup_hook(env_, &IbvDevice::Cleanup, this);
      hookAdded_ = false;
    }
  }

  bool Alive(const Napi::CallbackInfo& info) {
    if (ctx_) return true;
    system_error(info.Env(), kClassName, EBADF, "device is closed", "ERR_RDMA_CLOSED").ThrowAsJavaScriptException();
    return false;
  }

  // ------------------------------------------------------------ events (libuv callbacks)

  static void OnCompletionEvent(uv_poll_t* p, int status, int) {
    auto* self = static_cast<IbvDevice*>(p->data);
    if (status < 0 || !self->ctx_) return;
    self->events_.clear();
    ibv_cq* cq = nullptr;
    void* cqCtx = nullptr;
    while (self->api_->get_cq_event(self->channel_, &cq, &cqCtx) == 0) {
      int h = untag(cqCtx);
      auto it = self->cqs_.find(h);
      // Acked in batches: ibv_ack_cq_events takes a lock, and destroy_cq waits for acks.
      if (it != self->cqs_.end() && ++it->second.unacked >= 64) {
        self->api_->ack_cq_events(cq, it->second.unacked);
        it->second.unacked = 0;
      }
      // One doorbell per CQ per wake-up, however many events it had.
      bool seen = false;
      for (auto& [k, hh] : self->events_) seen |= hh == h;
      if (!seen) self->events_.push_back({EV_DOORBELL, h});
    }
    self->DeliverAll();
  }

  static void OnAsyncEvent(uv_poll_t* p, int status, int) {
    auto* self = static_cast<IbvDevice*>(p->data);
    if (!self->ctx_) return;
    self->events_.clear();
    if (status < 0) {  // the device went away (disassociated): libuv stops watching it
      self->events_.push_back({EV_PORT, IBV_EVENT_DEVICE_FATAL << 8});
      self->DeliverAll();
      return;
    }
    ibv_async_event e;
    while (self->api_->get_async_event(self->ctx_, &e) == 0) {
      switch (e.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
          self->events_.push_back({EV_QP_FATAL, untag(e.element.qp->qp_context)});
          break;
        case IBV_EVENT_CQ_ERR:
          self->events_.push_back({EV_CQ_ERR, untag(e.element.cq->cq_context)});
          break;
        case IBV_EVENT_SRQ_LIMIT_REACHED:
          self->events_.push_back({EV_SRQ_LIMIT, untag(e.element.srq->srq_context)});
          break;
        case IBV_EVENT_DEVICE_FATAL:
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_GID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
          self->events_.push_back({EV_PORT, (static_cast<int>(e.event_type) << 8) | e.element.port_num});
          break;
        default:
          break;
      }
      // Acked before JS runs: destroying the object an event names waits for its ack.
      self->api_->ack_async_event(&e);
    }
    self->DeliverAll();
  }

  void DeliverAll() {
    if (events_.empty()) return;
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    delivering_.swap(events_);  // the callback may close the device or cause new events
    events_.clear();
    for (auto& [kind, handle] : delivering_) {
      if (onEvent_.IsEmpty() || !ctx_ || !Deliver(env, kind, handle)) break;
    }
  }

  bool Deliver(Napi::Env env, int kind, int handle) {
    return deliver_event(env, static_cast<napi_async_context>(*asyncContext_), Value(), onEvent_.Value(), kind,
                         handle);
  }

  // ------------------------------------------------------------ device

  Napi::Value Close(const Napi::CallbackInfo& info) {
    // Deregister first, then detach: JS views cannot reach pages the NIC may still write.
    std::vector<Mr*> owned;
    for (auto& [h, m] : mrs_)
      if (m.mapping) owned.push_back(&m);
    for (Mr* m : owned) {
      api_->dereg_mr(m->mr);
      m->mr = nullptr;
      Napi::ArrayBuffer ab = m->buffer.Value();
      if (!ab.IsDetached()) ab.Detach();
      unmap(m->mapping);
    }
    for (auto it = mrs_.begin(); it != mrs_.end();) {
      if (!it->second.mr) {
        on_unregistered(it->second.mapping);
        it = mrs_.erase(it);
      } else {
        ++it;
      }
    }
    Teardown();
    return info.Env().Undefined();
  }

  // routeInfo(port?, gidIndex?): what an endpoint carries — port, LID, GID and its index,
  // path MTU, link layer — for the device's default route or the port/GID a QP asked for.
  Napi::Value RouteInfo(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    ibv::Route r = route_;
    int wantPort = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 0;
    int wantGid = info.Length() > 1 && info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : -1;
    std::string why;
    if ((wantPort > 0 || wantGid >= 0) && !ibv::choose_route(view_, &r, &why, wantPort, wantGid))
      return (Napi::Error::New(env, why).ThrowAsJavaScriptException(), env.Undefined());
    Napi::Object o = Napi::Object::New(env);
    o.Set("port", r.port);
    o.Set("lid", r.lid);
    o.Set("gidIndex", r.gidIndex);
    o.Set("gid", ibv::gid_text(r.gid));
    o.Set("mtu", static_cast<int>(r.mtu));
    o.Set("linkLayer", r.ethernet ? "Ethernet" : "InfiniBand");
    o.Set("maxRdAtomic", ResponderResources());
    return o;
  }

  // ------------------------------------------------------------ memory regions

  Napi::Value AllocMr(const Napi::CallbackInfo& info) {
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
    Napi::Array out = Napi::Array::New(env, 5);
    out.Set(0u, h);
    out.Set(1u, ab);
    out.Set(2u, static_cast<double>(reinterpret_cast<uint64_t>(p)));
    out.Set(3u, mr->lkey);
    out.Set(4u, mr->rkey);
    return out;
  }

  Napi::Value RegMr(const Napi::CallbackInfo& info) {
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
    Napi::Array out = Napi::Array::New(env, 4);
    out.Set(0u, h);
    out.Set(1u, static_cast<double>(reinterpret_cast<uint64_t>(addr)));
    out.Set(2u, mr->lkey);
    out.Set(3u, mr->rkey);
    return out;
  }

  Napi::Value DeregMr(const Napi::CallbackInfo& info) {
    int h = info[0].As<Napi::Number>().Int32Value();
    auto it = mrs_.find(h);
    if (it == mrs_.end() || !ctx_) return info.Env().Undefined();
    api_->dereg_mr(it->second.mr);
    if (Mapping* m = it->second.mapping) {
      Napi::ArrayBuffer ab = it->second.buffer.Value();
      if (!ab.IsDetached()) ab.Detach();
      unmap(m);
      on_unregistered(m);
    }
    mrs_.erase(it);
    return info.Env().Undefined();
  }

  // ------------------------------------------------------------ completion queues

  Napi::Value CreateCq(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    int capacity = info[0].As<Napi::Number>().Int32Value();
    int h = nextHandle_++;
    ibv_cq* cq = api_->create_cq(ctx_, capacity, tag(h), channel_, 0);
    if (!cq) return (system_error(env, "ibv_create_cq", errno).ThrowAsJavaScriptException(), env.Undefined());
    Cq& c = cqs_[h];
    c.cq = cq;
    c.staged.reserve(static_cast<size_t>(cq->cqe));
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroyCq(const Napi::CallbackInfo& info) {
    auto it = cqs_.find(info[0].As<Napi::Number>().Int32Value());
    if (it == cqs_.end() || !ctx_) return info.Env().Undefined();
    if (it->second.unacked) api_->ack_cq_events(it->second.cq, it->second.unacked);
    it->second.unacked = 0;  // acking twice would make destroy_cq wait forever
    int rc = api_->destroy_cq(it->second.cq);
    if (rc) return (system_error(info.Env(), "ibv_destroy_cq", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
    cqs_.erase(it);
    return info.Env().Undefined();
  }

  Cq* CqAt(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return nullptr;
    auto it = cqs_.find(info[0].As<Napi::Number>().Int32Value());
    if (it != cqs_.end()) return &it->second;
    system_error(info.Env(), kClassName, EBADF, "no such completion queue on this device", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return nullptr;
  }

  Napi::Value CqCapacity(const Napi::CallbackInfo& info) {
    Cq* c = CqAt(info);
    return c ? Napi::Number::New(info.Env(), c->cq->cqe) : info.Env().Undefined();
  }

  // One record per completion, 8 doubles, the layout of src/WorkCompletions.ts. The
  // immediate travels in network order: the receiver sees the number the sender posted.
  static void Encode(const ibv_wc& wc, double* r) {
    r[0] = static_cast<double>(wc.wr_id);
    r[1] = wc.status;
    r[2] = wc.status == IBV_WC_SUCCESS ? wc.opcode : 0;
    r[3] = wc.byte_len;
    r[4] = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
    r[5] = wc.qp_num;
    r[6] = static_cast<double>(wc.wc_flags & 0xff) + static_cast<double>(wc.vendor_err) * 256.0;
    r[7] = wc.src_qp;
  }

  Napi::Value PollCq(const Napi::CallbackInfo& info) {
    Cq* c = CqAt(info);
    if (!c) return info.Env().Undefined();
    Napi::Float64Array out = info[1].As<Napi::Float64Array>();
    int max = std::max(0, std::min(info[2].As<Napi::Number>().Int32Value(), static_cast<int>(out.ElementLength() / 8)));
    double* r = out.Data();
    int n = 0;
    while (n < max && c->head < c->staged.size()) Encode(c->staged[c->head++], r + 8 * n++);
    if (c->head == c->staged.size()) {
      c->staged.clear();
      c->head = 0;
    }
    if (n < max) {
      if (scratch_.size() < static_cast<size_t>(max)) scratch_.resize(static_cast<size_t>(max));
      int got = ibv_poll_cq(c->cq, max - n, scratch_.data());
      for (int i = 0; i < got; i++) Encode(scratch_[static_cast<size_t>(i)], r + 8 * n++);
    }
    return Napi::Number::New(info.Env(), n);
  }

  // Verbs cannot peek: completions are moved to the staging area and counted there.
  size_t Stage(Cq* c) {
    if (c->head > 0) {  // drop what was handed out: the area never outgrows the CQ
      c->staged.erase(c->staged.begin(), c->staged.begin() + static_cast<std::ptrdiff_t>(c->head));
      c->head = 0;
    }
    for (;;) {
      size_t room = static_cast<size_t>(c->cq->cqe) + 1 - (c->staged.size() - c->head);
      if (room == 0) break;
      if (scratch_.size() < room) scratch_.resize(room);
      int got = ibv_poll_cq(c->cq, static_cast<int>(room), scratch_.data());
      if (got <= 0) break;
      c->staged.insert(c->staged.end(), scratch_.begin(), scratch_.begin() + got);
    }
    return c->staged.size() - c->head;
  }

  Napi::Value CqCount(const Napi::CallbackInfo& info) {
    Cq* c = CqAt(info);
    return c ? Napi::Number::New(info.Env(), static_cast<double>(Stage(c))) : info.Env().Undefined();
  }

  // Arms the channel, then counts: a completion that arrived before the arm is reported
  // here instead of being waited for.
  Napi::Value ArmCq(const Napi::CallbackInfo& info) {
    Cq* c = CqAt(info);
    if (!c) return info.Env().Undefined();
    if (int rc = ibv_req_notify_cq(c->cq, 0))
      return (system_error(info.Env(), "ibv_req_notify_cq", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
    return Napi::Number::New(info.Env(), static_cast<double>(Stage(c)));
  }

  // ------------------------------------------------------------ shared receive queues

  Napi::Value CreateSrq(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    int h = nextHandle_++;
    ibv_srq_init_attr a{};
    a.srq_context = tag(h);
    a.attr.max_wr = info[0].As<Napi::Number>().Uint32Value();
    a.attr.max_sge = info[1].As<Napi::Number>().Uint32Value();
    ibv_srq* s = api_->create_srq(pd_, &a);
    if (!s) return (system_error(env, "ibv_create_srq", errno).ThrowAsJavaScriptException(), env.Undefined());
    srqs_[h] = Srq{s, a.attr.max_wr, a.attr.max_sge};
    return Napi::Number::New(env, h);
  }

  Napi::Value DestroySrq(const Napi::CallbackInfo& info) {
    auto it = srqs_.find(info[0].As<Napi::Number>().Int32Value());
    if (it == srqs_.end() || !ctx_) return info.Env().Undefined();
    if (int rc = api_->destroy_srq(it->second.srq))
      return (system_error(info.Env(), "ibv_destroy_srq", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
    srqs_.erase(it);
    return info.Env().Undefined();
  }

  Napi::Value PostSrqRecv(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    auto it = srqs_.find(info[0].As<Napi::Number>().Int32Value());
    if (it == srqs_.end()) return Napi::Number::New(info.Env(), POST_EINVAL);
    Napi::Float64Array wrs = info[1].As<Napi::Float64Array>();
    int count = info[2].As<Napi::Number>().Int32Value();
    ibv_recv_wr* list = DecodeRecv(wrs.Data(), count, it->second.maxSge);
    ibv_recv_wr* bad = nullptr;
    int rc = count ? ibv_post_srq_recv(it->second.srq, list, &bad) : 0;
    return Napi::Number::New(info.Env(), PostResult(rc, list, bad));
  }

  Napi::Value ArmSrqLimit(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return info.Env().Undefined();
    auto it = srqs_.find(info[0].As<Napi::Number>().Int32Value());
    if (it == srqs_.end()) return info.Env().Undefined();
    ibv_srq_attr a{};
    a.srq_limit = info[1].As<Napi::Number>().Uint32Value();
    if (int rc = api_->modify_srq(it->second.srq, &a, IBV_SRQ_LIMIT))
      system_error(info.Env(), "ibv_modify_srq", rc).ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }

  // ------------------------------------------------------------ queue pairs

  Napi::Value CreateQp(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!Alive(info)) return env.Undefined();
    auto num = [&](int i) { return info[static_cast<size_t>(i)].As<Napi::Number>().Int32Value(); };
    auto scq = cqs_.find(num(0)), rcq = cqs_.find(num(1));
    if (scq == cqs_.end() || rcq == cqs_.end())
      return (system_error(env, kClassName, EBADF, "no such completion queue on this device", "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException(), env.Undefined());
    ibv_srq* srq = nullptr;
    if (num(2) >= 0) {
      auto s = srqs_.find(num(2));
      if (s == srqs_.end())
        return (system_error(env, kClassName, EBADF, "no such shared receive queue on this device", "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException(), env.Undefined());
      srq = s->second.srq;
    }
    int h = nextHandle_++;
    ibv_qp_init_attr a{};
    a.qp_context = tag(h);
    a.send_cq = scq->second.cq;
    a.recv_cq = rcq->second.cq;
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = static_cast<uint32_t>(num(3));
    a.cap.max_recv_wr = srq ? 0 : static_cast<uint32_t>(num(4));
    a.cap.max_send_sge = static_cast<uint32_t>(num(5));
    a.cap.max_recv_sge = srq ? 0 : static_cast<uint32_t>(num(6));
    a.cap.max_inline_data = static_cast<uint32_t>(num(7));
    ibv_qp* qp = api_->create_qp(pd_, &a);
    if (!qp) return (system_error(env, "ibv_create_qp", errno).ThrowAsJavaScriptException(), env.Undefined());
    uint32_t psn = psnRng_() & 0xffffff;
    qps_[h] = Qp{qp, psn, QPS_RESET, a.cap, static_cast<uint32_t>(num(5)), static_cast<uint32_t>(num(6))};
    size_t sge = std::max<size_t>({static_cast<size_t>(num(5)), static_cast<size_t>(num(6)), 1});
    size_t wr = std::max<size_t>({static_cast<size_t>(num(3)), static_cast<size_t>(num(4)), 1});
    if (sendWrs_.size() < wr) sendWrs_.resize(wr), recvWrs_.resize(wr);
    if (sges_.size() < wr * sge) sges_.resize(wr * sge);
    return Napi::Number::New(env, h);
  }

  Qp* QpAt(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return nullptr;
    auto it = qps_.find(info[0].As<Napi::Number>().Int32Value());
    if (it != qps_.end()) return &it->second;
    system_error(info.Env(), kClassName, EBADF, "no such queue pair on this device", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return nullptr;
  }

  Napi::Value DestroyQp(const Napi::CallbackInfo& info) {
    auto it = qps_.find(info[0].As<Napi::Number>().Int32Value());
    if (it == qps_.end() || !ctx_) return info.Env().Undefined();
    int rc = api_->destroy_qp(it->second.qp);
    if (rc) return (system_error(info.Env(), "ibv_destroy_qp", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
    qps_.erase(it);
    return info.Env().Undefined();
  }

  // [qpn, psn, 0, granted maxSendWr, maxRecvWr, maxInlineData]
  Napi::Value QpInfo(const Napi::CallbackInfo& info) {
    Qp* q = QpAt(info);
    if (!q) return info.Env().Undefined();
    Napi::Array out = Napi::Array::New(info.Env(), 6);
    out.Set(0u, q->qp->qp_num);
    out.Set(1u, q->psn);
    out.Set(2u, 0);
    out.Set(3u, q->cap.max_send_wr);
    out.Set(4u, q->cap.max_recv_wr);
    out.Set(5u, q->cap.max_inline_data);
    return out;
  }

  // The device's view (it moves QPs to ERR by itself), not just the last transition.
  Napi::Value QpState(const Napi::CallbackInfo& info) {
    Qp* q = QpAt(info);
    if (!q) return info.Env().Undefined();
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (int rc = api_->query_qp(q->qp, &a, IBV_QP_STATE, &ia))
      return (system_error(info.Env(), "ibv_query_qp", rc).ThrowAsJavaScriptException(), info.Env().Undefined());
    int s = a.qp_state == IBV_QPS_SQE ? QPS_ERR : static_cast<int>(a.qp_state);
    if (s == QPS_ERR) q->state = QPS_ERR;
    return Napi::Number::New(info.Env(), s);
  }

  // modifyQp(h, state, ...): init(access, port?); rtr(destQpn, rqPsn, dlid, gid0..gid3, mtu,
  // minRnrTimer, port?, sgidIndex?, hopLimit?, sl?, trafficClass?); rts(timeout, retryCount,
  // rnrRetry, peer's maxRdAtomic). The optional ones default to the device's route, hop
  // limit 64, SL 0 and traffic class 0. Returns 0 or errno.
  Napi::Value ModifyQp(const Napi::CallbackInfo& info) {
    Qp* q = QpAt(info);
    if (!q) return info.Env().Undefined();
    auto arg = [&](size_t i) { return info[i].As<Napi::Number>().Uint32Value(); };
    int to = info[1].As<Napi::Number>().Int32Value();
    ibv_qp_attr a{};
    int mask = IBV_QP_STATE;
    uint8_t rdAtom = ResponderResources();
    uint8_t initRdAtom = static_cast<uint8_t>(std::clamp(view_.attr.max_qp_init_rd_atom, 1, 16));
    switch (to) {
      case QPS_RESET:
        a.qp_state = IBV_QPS_RESET;
        break;
      case QPS_INIT:
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = static_cast<uint8_t>(info.Length() > 3 ? arg(3) : route_.port);
        a.qp_access_flags = arg(2);
        mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        break;
      case QPS_RTR: {
        a.qp_state = IBV_QPS_RTR;
        a.dest_qp_num = arg(2);
        a.rq_psn = arg(3) & 0xffffff;
        a.ah_attr.dlid = static_cast<uint16_t>(arg(4));
        ibv_gid g{};
        for (int w = 0; w < 4; w++) {
          uint32_t be = htonl(arg(5 + static_cast<size_t>(w)));
          std::memcpy(g.raw + 4 * w, &be, 4);
        }
        bool global = false;
        for (uint8_t b : g.raw) global |= b != 0;
        bool path = info.Length() > 15;  // port, sgid index, hop limit, SL, traffic class
        int port = path ? static_cast<int>(arg(11)) : route_.port;
        int sgid = path ? info[12].As<Napi::Number>().Int32Value() : route_.gidIndex;
        if (global) {
          a.ah_attr.is_global = 1;
          a.ah_attr.grh.dgid = g;
          a.ah_attr.grh.sgid_index = static_cast<uint8_t>(std::max(sgid, 0));
          a.ah_attr.grh.hop_limit = static_cast<uint8_t>(path ? arg(13) : 64);
          a.ah_attr.grh.traffic_class = static_cast<uint8_t>(path ? arg(15) : 0);
        }
        a.ah_attr.sl = static_cast<uint8_t>(path ? arg(14) & 0xf : 0);
        a.ah_attr.port_num = static_cast<uint8_t>(port);
        ibv_mtu portMtu = route_.mtu;
        for (const auto& p : view_.ports)
          if (p.port == port) portMtu = p.attr.active_mtu;
        a.path_mtu = static_cast<ibv_mtu>(std::min<uint32_t>(arg(9), portMtu));
        a.min_rnr_timer = static_cast<uint8_t>(arg(10));
        a.max_dest_rd_atomic = rdAtom;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                IBV_QP_MIN_RNR_TIMER;
        break;
      }
      case QPS_RTS:
        a.qp_state = IBV_QPS_RTS;
        a.timeout = static_cast<uint8_t>(arg(2));
        a.retry_cnt = static_cast<uint8_t>(arg(3));
        a.rnr_retry = static_cast<uint8_t>(arg(4));
        a.sq_psn = q->psn;
        // Outstanding READs may not exceed what the peer's responder accepts (its endpoint).
        a.max_rd_atomic = info.Length() > 5 ? std::min<uint8_t>(initRdAtom, static_cast<uint8_t>(std::max(arg(5), 1u)))
                                            : initRdAtom;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
        break;
      default:
        a.qp_state = IBV_QPS_ERR;
        break;
    }
    int rc = api_->modify_qp(q->qp, &a, mask);
    if (rc == 0) q->state = to;
    return Napi::Number::New(info.Env(), rc);
  }

  // addr/length/lkey triples of the wire format.
  static void DecodeSges(const double* w, uint32_t n, ibv_sge* sg) {
    for (uint32_t k = 0; k < n; k++) {
      sg[k].addr = static_cast<uint64_t>(w[3 * k]);
      sg[k].length = static_cast<uint32_t>(w[3 * k + 1]);
      sg[k].lkey = static_cast<uint32_t>(w[3 * k + 2]);
    }
  }

  // READs this device's QPs accept in flight as responders (max_dest_rd_atomic).
  uint8_t ResponderResources() const { return static_cast<uint8_t>(std::clamp(view_.attr.max_qp_rd_atom, 1, 16)); }

  // Wire format of src/internal/encode.ts, packed back to back: send = wrId, opcode, flags,
  // imm, remoteAddr, rkey, numSge, then addr/length/lkey per SGE.
  ibv_send_wr* DecodeSend(const double* w, int count, uint32_t maxSge) {
    if (sges_.size() < static_cast<size_t>(count) * maxSge) sges_.resize(static_cast<size_t>(count) * maxSge);
    size_t nextSge = 0;
    static constexpr ibv_wr_opcode kOp[] = {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
                                            IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ};
    size_t p = 0;
    for (int i = 0; i < count; i++) {
      ibv_send_wr& wr = sendWrs_[static_cast<size_t>(i)];
      wr = ibv_send_wr{};
      wr.wr_id = static_cast<uint64_t>(w[p]);
      int op = static_cast<int>(w[p + 1]);  // 0..4: checked by PostSend before decoding
      wr.opcode = kOp[std::clamp(op, 0, 4)];
      int flags = static_cast<int>(w[p + 2]);
      wr.send_flags = ((flags & FLAG_SIGNALED) ? IBV_SEND_SIGNALED : 0) | ((flags & FLAG_INLINE) ? IBV_SEND_INLINE : 0);
      wr.imm_data = htonl(static_cast<uint32_t>(w[p + 3]));
      wr.wr.rdma.remote_addr = static_cast<uint64_t>(w[p + 4]);
      wr.wr.rdma.rkey = static_cast<uint32_t>(w[p + 5]);
      uint32_t n = std::min(static_cast<uint32_t>(w[p + 6]), maxSge);
      ibv_sge* sg = sges_.data() + nextSge;
      nextSge += n;
      DecodeSges(w + p + 7, n, sg);
      wr.sg_list = n ? sg : nullptr;
      wr.num_sge = static_cast<int>(n);
      wr.next = i + 1 < count ? &sendWrs_[static_cast<size_t>(i) + 1] : nullptr;
      p += 7 + 3 * n;
    }
    return sendWrs_.data();
  }

  // recv = wrId, numSge, then addr/length/lkey per SGE.
  ibv_recv_wr* DecodeRecv(const double* w, int count, uint32_t maxSge) {
    if (recvWrs_.size() < static_cast<size_t>(count)) recvWrs_.resize(static_cast<size_t>(count));
    if (sges_.size() < static_cast<size_t>(count) * maxSge) sges_.resize(static_cast<size_t>(count) * maxSge);
    size_t p = 0, nextSge = 0;
    for (int i = 0; i < count; i++) {
      ibv_recv_wr& wr = recvWrs_[static_cast<size_t>(i)];
      wr = ibv_recv_wr{};
      wr.wr_id = static_cast<uint64_t>(w[p]);
      uint32_t n = std::min(static_cast<uint32_t>(w[p + 1]), maxSge);
      ibv_sge* sg = sges_.data() + nextSge;
      nextSge += n;
      DecodeSges(w + p + 2, n, sg);
      wr.sg_list = n ? sg : nullptr;
      wr.num_sge = static_cast<int>(n);
      wr.next = i + 1 < count ? &recvWrs_[static_cast<size_t>(i) + 1] : nullptr;
      p += 2 + 3 * n;
    }
    return recvWrs_.data();
  }

  // (index of the first WR not posted << 8) | code, as the soft provider reports it.
  template <typename Wr>
  static int PostResult(int rc, Wr* list, Wr* bad) {
    if (rc == 0) return 0;
    if (rc < 0) rc = -rc;  // rxe in rdma-core < 44 returns negative errnos
    int index = bad ? static_cast<int>(bad - list) : 0;
    int code = rc == ENOMEM ? POST_ENOMEM : rc == EINVAL ? POST_EINVAL : POST_OTHER;
    return (index << 8) | code;
  }

  // Checks the wire array (argument 1) and count (argument 2) before anything is decoded:
  // returns the index of the first WR that overruns the array, names more SGEs than the
  // queue takes or an unknown opcode (count when all are well formed), or -1 with a typed
  // error pending when argument 1 is not a Float64Array. The count asked for is wanted_.
  int WireArg(const Napi::CallbackInfo& info, uint32_t maxSge, bool send, const double** w, int* count) {
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
      system_error(info.Env(), kClassName, EINVAL, "work requests must be a Float64Array", "ERR_RDMA_INVALID_ARG")
          .ThrowAsJavaScriptException();
      return -1;
    }
    Napi::Float64Array a = info[1].As<Napi::Float64Array>();
    double c = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0;
    *count = c > 0 ? static_cast<int>(std::min(c, 4194304.0)) : 0;
    wanted_ = *count;
    *w = a.Data();
    size_t words = a.ElementLength(), p = 0, head = send ? 7 : 2;
    for (int i = 0; i < *count; i++) {
      if (p + head > words) return i;
      double n = (*w)[p + head - 1];
      if (!(n >= 0 && n <= maxSge) || p + head + 3 * static_cast<size_t>(n) > words) return i;
      if (send && !((*w)[p + 1] >= 0 && (*w)[p + 1] <= 4)) return i;  // never READ in disguise
      p += head + 3 * static_cast<size_t>(n);
    }
    return *count;
  }

  Napi::Value PostSend(const Napi::CallbackInfo& info) {
    Qp* q = QpAt(info);
    if (!q) return info.Env().Undefined();
    // rxe keeps sends posted before RTS and runs them later; verbs says EINVAL: reject.
    if (q->state != QPS_RTS && q->state != QPS_ERR) return Napi::Number::New(info.Env(), POST_EINVAL);
    const double* w = nullptr;
    int count = 0, bad = WireArg(info, q->maxSendSge, true, &w, &count);
    if (bad < 0) return info.Env().Undefined();
    if (bad < count) count = bad;  // the WRs before a malformed one are posted
    if (count == 0) return Napi::Number::New(info.Env(), wanted_ > 0 ? POST_EINVAL : 0);
    if (sendWrs_.size() < static_cast<size_t>(count)) sendWrs_.resize(static_cast<size_t>(count));
    ibv_send_wr* list = DecodeSend(w, count, q->maxSendSge);
    // The provider copies inline data from these addresses in post_send: an address
    // outside registered memory would crash the process, so such a post is refused.
    int ok = count;  // WRs before the first refused one are posted
    for (int i = 0; i < count && ok == count; i++) {
      const ibv_send_wr& wr = list[i];
      if (!(wr.send_flags & IBV_SEND_INLINE)) continue;
      for (int k = 0; k < wr.num_sge; k++) {
        if (wr.sg_list[k].length && !Registered(wr.sg_list[k].addr, wr.sg_list[k].length)) ok = i;
      }
    }
    if (ok == 0) return Napi::Number::New(info.Env(), POST_BAD_INLINE);
    list[ok - 1].next = nullptr;
    ibv_send_wr* badWr = nullptr;
    int rc = ibv_post_send(q->qp, list, &badWr);
    if (rc == 0 && ok < count) return Napi::Number::New(info.Env(), (ok << 8) | POST_BAD_INLINE);
    if (rc == 0 && count < wanted_) return Napi::Number::New(info.Env(), (count << 8) | POST_EINVAL);
    return Napi::Number::New(info.Env(), PostResult(rc, list, badWr));
  }

  // Whether [addr, addr + len) lies in one of this device's registrations (any key: verbs
  // ignores the lkey of inline data).
  bool Registered(uint64_t addr, uint64_t len) const {
    for (const auto& [h, m] : mrs_) {
      auto base = reinterpret_cast<uint64_t>(m.mr->addr);
      if (addr >= base && addr + len <= base + m.mr->length && addr + len >= addr) return true;
    }
    return false;
  }

  Napi::Value PostRecv(const Napi::CallbackInfo& info) {
    Qp* q = QpAt(info);
    if (!q) return info.Env().Undefined();
    if (q->state == QPS_RESET) return Napi::Number::New(info.Env(), POST_EINVAL);
    const double* w = nullptr;
    int count = 0, bad = WireArg(info, q->maxRecvSge, false, &w, &count);
    if (bad < 0) return info.Env().Undefined();
    if (bad == 0 && count > 0) return Napi::Number::New(info.Env(), POST_EINVAL);
    if (bad < count) count = bad;
    if (count == 0) return Napi::Number::New(info.Env(), 0);
    ibv_recv_wr* list = DecodeRecv(w, count, q->maxRecvSge);
    ibv_recv_wr* badWr = nullptr;
    int rc = ibv_post_recv(q->qp, list, &badWr);
    if (rc == 0 && count < wanted_) return Napi::Number::New(info.Env(), (count << 8) | POST_EINVAL);
    return Napi::Number::New(info.Env(), PostResult(rc, list, badWr));
  }

  const Api* api_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;  // one per device: JS protection domains share it (see README)
  ibv_comp_channel* channel_ = nullptr;
  uint64_t guid_ = 0;
  ibv::DeviceView view_;
  ibv::Route route_{};
  std::mt19937 psnRng_;
  Napi::FunctionReference onEvent_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
  uv_poll_t* compPoll_ = nullptr;
  uv_poll_t* asyncPoll_ = nullptr;
  napi_env env_ = nullptr;
  bool hookAdded_ = false;
  int nextHandle_ = 1;
  std::map<int, Mr> mrs_;
  std::map<int, Cq> cqs_;
  std::map<int, Qp> qps_;
  std::map<int, Srq> srqs_;
  std::vector<std::pair<int, int>> events_, delivering_;
  // Scratch reused by every call: no allocation per post or poll in steady state.
  std::vector<ibv_wc> scratch_;
  std::vector<ibv_send_wr> sendWrs_;
  std::vector<ibv_recv_wr> recvWrs_;
  std::vector<ibv_sge> sges_;
  int wanted_ = 0;  // WRs the current post asked for (WireArg)
};

Napi::Object DescribeDevice(Napi::Env env, const ibv::DeviceView& d) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", d.name);
  o.Set("guid", d.guid);
  Napi::Array ports = Napi::Array::New(env, d.ports.size());
  for (size_t i = 0; i < d.ports.size(); i++) {
    const auto& p = d.ports[i];
    Napi::Object po = Napi::Object::New(env);
    po.Set("port", p.port);
    po.Set("state", static_cast<int>(p.attr.state));
    po.Set("activeMtu", static_cast<int>(p.attr.active_mtu));
    po.Set("linkLayer", p.attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
    po.Set("lid", p.attr.lid);
    po.Set("maxMsgSize", static_cast<double>(p.attr.max_msg_sz));
    Napi::Array gids = Napi::Array::New(env, p.gids.size());
    for (size_t g = 0; g < p.gids.size(); g++) {
      Napi::Object go = Napi::Object::New(env);
      go.Set("index", p.gids[g].index);
      go.Set("gid", p.gids[g].text);
      go.Set("type", p.gids[g].type);
      gids.Set(static_cast<uint32_t>(g), go);
    }
    po.Set("gids", gids);
    ports.Set(static_cast<uint32_t>(i), po);
  }
  o.Set("ports", ports);
  const ibv_device_attr& a = d.attr;
  Napi::Object l = Napi::Object::New(env);
  l.Set("maxQp", a.max_qp);
  l.Set("maxQpWr", a.max_qp_wr);
  l.Set("maxSge", a.max_sge);
  l.Set("maxCq", a.max_cq);
  l.Set("maxCqe", a.max_cqe);
  l.Set("maxMr", a.max_mr);
  l.Set("maxMrSize", Napi::BigInt::New(env, static_cast<uint64_t>(a.max_mr_size)));  // 64-bit: exact
  l.Set("maxInlineData", d.maxInline);
  l.Set("maxSrq", a.max_srq);
  l.Set("maxSrqWr", a.max_srq_wr);
  l.Set("maxQpRdAtom", a.max_qp_rd_atom);
  o.Set("limits", l);
  return o;
}

// { available, reason?, devices: [...] }: what the ibverbs provider can offer here.
Napi::Value IbvStatus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("compiled", true);
  Napi::Array devices = Napi::Array::New(env);
  o.Set("devices", devices);
  std::string why;
  const Api* api = ibv::load(&why);
  if (!api) {
    o.Set("reason", why);
    return o;
  }
  int n = 0;
  ibv_device** list = api->get_device_list(&n);
  if (!list) {
    o.Set("reason", std::string("ibv_get_device_list: ") + std::strerror(errno));
    return o;
  }
  uint32_t k = 0;
  for (int i = 0; i < n; i++) {
    std::string name = api->get_device_name(list[i]);
    ibv_context* ctx = api->open_device(list[i]);
    if (!ctx) {
      why = "ibv_open_device(" + name + "): " + std::strerror(errno);
      continue;
    }
    ibv::DeviceView view;
    if (ibv::describe(*api, ctx, name, api->get_device_guid(list[i]), &view, &why))
      devices.Set(k++, DescribeDevice(env, view));
    api->close_device(ctx);
  }
  api->free_device_list(list);
  if (k == 0) o.Set("reason", n == 0 ? std::string("libibverbs found no RDMA device") : why);
  return o;
}

}  // namespace

void register_ibverbs(Napi::Env env, Napi::Object exports) {
  exports.Set("IbvDevice", IbvDevice::Define(env));
  exports.Set("ibvStatus", Napi::Function::New(env, IbvStatus));
}

}  // namespace rdmajs

// The ibverbs device object: opening (device, PD, completion channel), its two event
// sources (completion channel, async events) as libuv watches, close and teardown, and
// the route an endpoint carries.
#include "device.h"

#include <fcntl.h>
#include <unistd.h>

namespace rdmajs {

namespace {

int set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

}  // namespace

IbvDevice::IbvDevice(const Napi::CallbackInfo& info) : DeviceWrap(info) {
  Napi::Env env = info.Env();
  static constexpr const char* kUsage =
      "new IbvDevice(name, onEvent, post) takes a device name, a function and a Uint32Array(POST_RECORD_WORDS)";
  if (!info[0].IsString() || !info[1].IsFunction()) {
    system_error(env, kClassName, EINVAL, kUsage, "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException();
    return;
  }
  if (!AdoptPostRecord(info, 2, kUsage)) return;
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
  Attach(env, "rdmajs:ibverbs-device");
  uv_loop_t* loop = Loop(env);
  compPoll_ = StartPoll(loop, channel_->fd, &IbvDevice::OnCompletionEvent);
  asyncPoll_ = StartPoll(loop, ctx_->async_fd, &IbvDevice::OnAsyncEvent);
}

void IbvDevice::Teardown() {
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
  Detach();
}

void IbvDevice::OnCompletionEvent(uv_poll_t* p, int status, int) {
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

void IbvDevice::OnAsyncEvent(uv_poll_t* p, int status, int) {
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
      case IBV_EVENT_QP_ACCESS_ERR: self->events_.push_back({EV_QP_FATAL, untag(e.element.qp->qp_context)}); break;
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        self->events_.push_back({EV_QP_LAST_WQE, untag(e.element.qp->qp_context)});
        break;
      case IBV_EVENT_CQ_ERR: self->events_.push_back({EV_CQ_ERR, untag(e.element.cq->cq_context)}); break;
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
      default: break;
    }
    // Acked before JS runs: destroying the object an event names waits for its ack.
    self->api_->ack_async_event(&e);
  }
  self->DeliverAll();
}

Napi::Value IbvDevice::Close(const Napi::CallbackInfo& info) {
  // Deregister first, then detach: JS views cannot reach pages the NIC may still write.
  std::vector<Mr*> owned;
  for (auto& [h, m] : mrs_)
    if (m.mapping) owned.push_back(&m);
  for (Mr* m : owned) {
    api_->dereg_mr(m->mr);
    m->mr = nullptr;
    DetachBuffer(m->buffer);
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

Napi::Value IbvDevice::RouteInfo(const Napi::CallbackInfo& info) {
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

}  // namespace rdmajs

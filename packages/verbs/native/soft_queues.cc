// Completion queues, shared receive queues and queue pairs of the soft device, and posting.
#include "records.h"
#include "soft_device.h"

#include <sched.h>

#include <chrono>

namespace rdmajs {

Napi::Value SoftDevice::CreateCq(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  uint32_t capacity = U32(info, 0);
  if (capacity == 0 || capacity > soft::DeviceLimits::maxCqe)
    return Fail(info, EINVAL, "capacity must be in [1, maxCqe]", "ERR_RDMA_OUT_OF_RANGE");
  int h = dev_->createCq(capacity);
  if (h < 0) return (system_error(env, "ibv_create_cq", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
  return Napi::Number::New(env, h);
}

Napi::Value SoftDevice::DestroyCq(const Napi::CallbackInfo& info) {
  int h = static_cast<int>(soft::to_u32(Num(info, 0)));
  if (dev_ && dev_->destroyCq(h) == EBUSY)
    return Fail(info, EBUSY, "a queue pair still uses this completion queue", "ERR_RDMA_BUSY");
  return info.Env().Undefined();
}

Napi::Value SoftDevice::CqCapacity(const Napi::CallbackInfo& info) {
  int h;
  if (!CqArg(info, 0, &h)) return info.Env().Undefined();
  return Napi::Number::New(info.Env(), dev_->cqCapacity(h));
}

Napi::Value SoftDevice::PollCq(const Napi::CallbackInfo& info) {
  int h;
  ArrayView out;
  if (!CqArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &out)) return info.Env().Undefined();
  int max = static_cast<int>(std::min<size_t>(U32(info, 2), out.length / 8));  // never past `out`
  // armIfEmpty (optional): CompletionQueue arms for the wait it expects next (soft/cq.cc).
  bool arm = info.Length() > 3 && info[3].IsNumber() && info[3].As<Napi::Number>().DoubleValue() == 1;
  int n = dev_->pollCq(h, out.f64(), max, arm);
  Schedule();
  return Napi::Number::New(info.Env(), n);
}

Napi::Value SoftDevice::CqCount(const Napi::CallbackInfo& info) {
  int h;
  if (!CqArg(info, 0, &h)) return info.Env().Undefined();
  uint32_t n = dev_->cqCount(h);
  Schedule();
  return Napi::Number::New(info.Env(), n);
}

Napi::Value SoftDevice::SpinCq(const Napi::CallbackInfo& info) {
  int h;
  if (!CqArg(info, 0, &h)) return info.Env().Undefined();
  using Clock = std::chrono::steady_clock;
  // A yield longer than this handed the core to another process for its time slice: the peer
  // that answers takes microseconds.
  constexpr auto kSlowYield = std::chrono::microseconds(200);
  Clock::time_point start = Clock::now();
  double us = std::clamp(Num(info, 1), 0.0, 1e6);
  Clock::time_point until = start + std::chrono::nanoseconds(static_cast<int64_t>(us * 1000));
  bool slow = false;
  // A wait: the peer it may wait for hears of what this side posted first.
  dev_->ringOwed();
  // The count also moves due retries and large copies on (Device::cqCount).
  uint32_t n = dev_->cqCount(h);
  if (n == 0 && Num(info, 2) != 0) {
    // Nothing yet (and the caller allows it): give the core up once. The same-host peer that
    // answers was woken by our doorbell, or is spinning, and often waits for this very core
    // (the kernel places a wakee near its waker); a tight spin held it off until the spin
    // ended (on a loaded 2-core host a 50 µs spin then almost never saw the answer). Once,
    // not per poll: each yield moves this task's scheduler deadline a slice later, and yields
    // in a loop left it starved for milliseconds behind other processes. With nothing else
    // runnable it returns at once.
    sched_yield();
    slow = Clock::now() - start > kSlowYield;
    n = dev_->cqCount(h);
  }
  while (n == 0 && Clock::now() < until) n = dev_->cqCount(h);
  Schedule();
  // −(n + 1) says the yield was slow (a small integer either way: nothing allocated in JS).
  return Napi::Number::New(info.Env(), slow ? -static_cast<double>(n) - 1 : n);
}

Napi::Value SoftDevice::FlushDoorbells(const Napi::CallbackInfo& info) {
  if (dev_) dev_->ringOwed();  // closed: it rang what it owed as it closed
  return info.Env().Undefined();
}

Napi::Value SoftDevice::ArmCq(const Napi::CallbackInfo& info) {
  int h;
  if (!CqArg(info, 0, &h)) return info.Env().Undefined();
  return Napi::Number::New(info.Env(), dev_->armCq(h, Num(info, 1) != 0));
}

Napi::Value SoftDevice::CreateSrq(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!Alive(info)) return env.Undefined();
  uint32_t maxWr = U32(info, 0), maxSge = U32(info, 1);
  if (maxWr == 0 || maxWr > soft::DeviceLimits::maxSrqWr || maxSge == 0 || maxSge > soft::DeviceLimits::maxSge)
    return Fail(info, EINVAL, "maxWr/maxSge out of the device's range", "ERR_RDMA_OUT_OF_RANGE");
  int h = dev_->createSrq(maxWr, maxSge);
  if (h < 0) return (system_error(env, "ibv_create_srq", ENOMEM).ThrowAsJavaScriptException(), env.Undefined());
  return Napi::Number::New(env, h);
}

Napi::Value SoftDevice::DestroySrq(const Napi::CallbackInfo& info) {
  int h = static_cast<int>(soft::to_u32(Num(info, 0)));
  if (dev_ && dev_->destroySrq(h) == EBUSY)
    return Fail(info, EBUSY, "a queue pair still uses this shared receive queue", "ERR_RDMA_BUSY");
  return info.Env().Undefined();
}

Napi::Value SoftDevice::PostSrqRecv(const Napi::CallbackInfo& info) {
  int h;
  ArrayView wrs;
  if (!SrqArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &wrs)) return info.Env().Undefined();
  return Posted(info.Env(), dev_->postSrqRecv(h, wrs.f64(), wrs.length, Count(info, 2)));
}

Napi::Value SoftDevice::ArmSrqLimit(const Napi::CallbackInfo& info) {
  int h;
  if (!SrqArg(info, 0, &h)) return info.Env().Undefined();
  dev_->armSrqLimit(h, U32(info, 1));
  return info.Env().Undefined();
}

Napi::Value SoftDevice::CreateQp(const Napi::CallbackInfo& info) {
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

Napi::Value SoftDevice::DestroyQp(const Napi::CallbackInfo& info) {
  int h = static_cast<int>(soft::to_u32(Num(info, 0)));
  if (dev_) dev_->destroyQp(h);
  return info.Env().Undefined();
}

// qpInfo(h) → { qpn, slot, gen }: the slot and generation of its shared descriptor are
// what a peer's endpoint names it by.
Napi::Value SoftDevice::QpInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int h;
  if (!QpArg(info, 0, &h)) return env.Undefined();
  Napi::Object out = Napi::Object::New(env);
  out.Set("qpn", dev_->qpNum(h));
  out.Set("slot", dev_->qpSlot(h));
  out.Set("gen", dev_->qpGen(h));
  return out;
}

Napi::Value SoftDevice::QpState(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  return Napi::Number::New(info.Env(), dev_->qpState(h));
}

// modifyQp(h, state, attr): QPS_INIT { access }; QPS_RTR { pid, segFd, bellFd, slot, gen,
// qpn, nonce, minRnrTimer } (the peer's endpoint); QPS_RTS { timeout, retryCount, rnrRetry };
// QPS_ERR and QPS_RESET take none. Returns errno (0: done).
Napi::Value SoftDevice::ModifyQp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int h;
  if (!QpArg(info, 0, &h)) return env.Undefined();
  uint32_t to = U32(info, 1);
  int rc = EINVAL;
  switch (to) {
    case soft::QPS_INIT: {
      Attr a(info, 2, "modifyQp(init)");
      uint32_t access = a.U32("access");
      if (!a.ok()) return env.Undefined();
      rc = dev_->toInit(h, access);
      break;
    }
    case soft::QPS_RTR: {
      Attr a(info, 2, "modifyQp(rtr)");
      auto pid = static_cast<pid_t>(a.U32("pid", INT32_MAX));
      auto segFd = static_cast<int>(a.U32("segFd", INT32_MAX)), bellFd = static_cast<int>(a.U32("bellFd", INT32_MAX));
      uint32_t slot = a.U32("slot"), gen = a.U32("gen"), qpn = a.U32("qpn"), minRnr = a.U32("minRnrTimer", 31);
      uint64_t nonce = soft::to_u64(a.Int("nonce", 0, 9007199254740991.0));
      if (!a.ok()) return env.Undefined();
      const soft::SysError* se = nullptr;
      rc = dev_->toRtr(h, pid, segFd, bellFd, nonce, slot, gen, qpn, minRnr, &se);
      if (se) return RtrError(info, *se);
      break;
    }
    case soft::QPS_RTS: {
      Attr a(info, 2, "modifyQp(rts)");
      uint32_t timeout = a.U32("timeout", 31), retry = a.U32("retryCount", 7), rnr = a.U32("rnrRetry", 7);
      if (!a.ok()) return env.Undefined();
      rc = dev_->toRts(h, timeout, retry, rnr);
      break;
    }
    case soft::QPS_ERR: rc = dev_->toErr(h); break;
    case soft::QPS_RESET: rc = dev_->toReset(h); break;
    default: break;
  }
  return Napi::Number::New(env, rc);
}

Napi::Value SoftDevice::RtrError(const Napi::CallbackInfo& info, const soft::SysError& se) {
  if (se.err == EPERM || se.err == ESRCH || se.err == ESTALE || se.err == EXDEV) {
    const char* why =
        se.err == EPERM ? "the peer process does not let this one take its file descriptors (ptrace access check: Yama "
                          "ptrace_scope, a different user or a sandbox); run both under one user with ptrace_scope 0/1 "
                          "(the soft provider sets PR_SET_PTRACER), or use the TCP link (openDevice({ link: 'tcp' }))"
        : se.err == ESRCH ? "the peer process is gone"
        : se.err == EXDEV ? "the peer process is in another pid or time namespace, where shared queue locks cannot tell "
                            "a live holder from a dead one; use the TCP link (openDevice({ link: 'tcp' }))"
                          : "the endpoint names a device that no longer exists";
    system_error(info.Env(), se.syscall, se.err, why, "ERR_RDMA_UNREACHABLE").ThrowAsJavaScriptException();
  } else {
    system_error(info.Env(), se.syscall, se.err).ThrowAsJavaScriptException();
  }
  return info.Env().Undefined();
}

Napi::Value SoftDevice::PostSend(const Napi::CallbackInfo& info) {
  int h;
  ArrayView wrs;
  if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &wrs)) return info.Env().Undefined();
  // JS takes a link QP's ready WRs right after the post (afterPost): no doorbell for them.
  dev_->jsTakesLink = true;
  // A list's SENDs to one peer, and those of the posts after it in this JS: one doorbell.
  HoldJob();
  // The WRs may begin past the array's start (a SendWrList's record): never past its end.
  size_t start = std::min<size_t>(U32(info, 3), wrs.length);
  soft::PostResult r = dev_->postSend(h, wrs.f64() + start, wrs.length - start, Count(info, 2));
  dev_->jsTakesLink = false;
  Schedule();
  return Posted(info.Env(), r);
}

Napi::Value SoftDevice::PostRecv(const Napi::CallbackInfo& info) {
  int h;
  ArrayView wrs;
  if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &wrs)) return info.Env().Undefined();
  return Posted(info.Env(), dev_->postRecv(h, wrs.f64(), wrs.length, Count(info, 2)));
}

}  // namespace rdmajs

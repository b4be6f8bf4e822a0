// The ibverbs provider's Node-API adapter: the same handle-based surface as the soft
// provider (see src/internal/native.ts), on libibverbs. JS validates, C++ trusts. Methods
// are defined by concept in device.cc, memory.cc, cq.cc, qp.cc and post.cc.
#pragma once

#include <napi.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../abi.h"
#include "../addon.h"
#include "../device_wrap.h"
#include "api.h"
#include "discovery.h"

namespace rdmajs {

using ibv::Api;

// The numbers shared with JS are the contract's (native/abi.h).
using abi::EV_CQ_ERR, abi::EV_DOORBELL, abi::EV_PORT, abi::EV_QP_FATAL, abi::EV_SRQ_LIMIT;
using abi::FLAG_INLINE, abi::FLAG_SIGNALED;
using abi::POST_BAD_INLINE, abi::POST_EINVAL, abi::POST_ENOMEM, abi::POST_OTHER;
using abi::QPS_ERR, abi::QPS_INIT, abi::QPS_RESET, abi::QPS_RTR, abi::QPS_RTS;

// A handle stored in a verbs object's context pointer (events name the object by it).
inline void* tag(int h) { return reinterpret_cast<void*>(static_cast<intptr_t>(h)); }
inline int untag(void* p) { return static_cast<int>(reinterpret_cast<intptr_t>(p)); }

class IbvDevice : public DeviceWrap<IbvDevice> {
 public:
  static constexpr napi_type_tag kTypeTag = {0x7264'6d61'6a73'0002ull, 0x6962'7665'7262'7331ull};
  static constexpr const char* kClassName = "IbvDevice";

  static Napi::Function Define(Napi::Env env) {
    return DefineDevice(env, {Tagged<IbvDevice>::Def<&IbvDevice::RouteInfo>(env, "routeInfo")});
  }

  // new IbvDevice(name, onEvent)
  explicit IbvDevice(const Napi::CallbackInfo& info);

  ~IbvDevice() override { Teardown(); }

 private:
  friend class DeviceWrap<IbvDevice>;

  bool Open() const { return ctx_ != nullptr; }
  // The handler may close the device: the rest of its batch is dropped.
  bool Delivering() const { return ctx_ != nullptr; }

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
    int state;                        // as last set by the application: posts are checked against it
    ibv_qp_cap cap;                   // what the device granted (often more than asked: rxe rounds rings up)
    uint32_t maxSendSge, maxRecvSge;  // what JS packs with
  };
  struct Srq {
    ibv_srq* srq;
    uint32_t maxWr, maxSge;
  };

  // Destroys in the order verbs require: QPs, SRQs, CQs (after acking their events), MRs,
  // then the PD, the channel and the context.
  void Teardown();

  // ------------------------------------------------------------ events (libuv callbacks)

  static void OnCompletionEvent(uv_poll_t* p, int status, int);

  static void OnAsyncEvent(uv_poll_t* p, int status, int);

  // ------------------------------------------------------------ device

  Napi::Value Close(const Napi::CallbackInfo& info);

  // routeInfo(port?, gidIndex?): what an endpoint carries — port, LID, GID and its index,
  // path MTU, link layer — for the device's default route or the port/GID a QP asked for.
  Napi::Value RouteInfo(const Napi::CallbackInfo& info);

  // ------------------------------------------------------------ memory regions

  Napi::Value AllocMr(const Napi::CallbackInfo& info);

  Napi::Value RegMr(const Napi::CallbackInfo& info);

  Napi::Value DeregMr(const Napi::CallbackInfo& info);

  // ------------------------------------------------------------ completion queues

  Napi::Value CreateCq(const Napi::CallbackInfo& info);

  Napi::Value DestroyCq(const Napi::CallbackInfo& info);

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
  static void Encode(const ibv_wc& wc, double* r);

  Napi::Value PollCq(const Napi::CallbackInfo& info);

  // Verbs cannot peek: completions are moved to the staging area and counted there.
  size_t Stage(Cq* c);

  Napi::Value CqCount(const Napi::CallbackInfo& info) {
    Cq* c = CqAt(info);
    return c ? Napi::Number::New(info.Env(), static_cast<double>(Stage(c))) : info.Env().Undefined();
  }

  // Arms the channel, then counts: a completion that arrived before the arm is reported
  // here instead of being waited for.
  Napi::Value ArmCq(const Napi::CallbackInfo& info);

  // ------------------------------------------------------------ shared receive queues

  Napi::Value CreateSrq(const Napi::CallbackInfo& info);

  Napi::Value DestroySrq(const Napi::CallbackInfo& info);

  Napi::Value PostSrqRecv(const Napi::CallbackInfo& info);

  Napi::Value ArmSrqLimit(const Napi::CallbackInfo& info);

  // ------------------------------------------------------------ queue pairs

  Napi::Value CreateQp(const Napi::CallbackInfo& info);

  Qp* QpAt(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return nullptr;
    auto it = qps_.find(info[0].As<Napi::Number>().Int32Value());
    if (it != qps_.end()) return &it->second;
    system_error(info.Env(), kClassName, EBADF, "no such queue pair on this device", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return nullptr;
  }

  Napi::Value DestroyQp(const Napi::CallbackInfo& info);

  // [qpn, psn, 0, granted maxSendWr, maxRecvWr, maxInlineData]
  Napi::Value QpInfo(const Napi::CallbackInfo& info);

  // The device's view (it moves QPs to ERR by itself), not just the last transition.
  Napi::Value QpState(const Napi::CallbackInfo& info);

  // modifyQp(h, state, ...): init(access, port?); rtr(destQpn, rqPsn, dlid, gid0..gid3, mtu,
  // minRnrTimer, port?, sgidIndex?, hopLimit?, sl?, trafficClass?); rts(timeout, retryCount,
  // rnrRetry, peer's maxRdAtomic). The optional ones default to the device's route, hop
  // limit 64, SL 0 and traffic class 0. Returns 0 or errno.
  Napi::Value ModifyQp(const Napi::CallbackInfo& info);

  // addr/length/lkey triples of the wire format.
  static void DecodeSges(const double* w, uint32_t n, ibv_sge* sg);

  // READs this device's QPs accept in flight as responders (max_dest_rd_atomic).
  uint8_t ResponderResources() const { return static_cast<uint8_t>(std::clamp(view_.attr.max_qp_rd_atom, 1, 16)); }

  // Wire format of src/internal/encode.ts, packed back to back: send = wrId, opcode, flags,
  // imm, remoteAddr, rkey, numSge, then addr/length/lkey per SGE.
  ibv_send_wr* DecodeSend(const double* w, int count, uint32_t maxSge);

  // recv = wrId, numSge, then addr/length/lkey per SGE.
  ibv_recv_wr* DecodeRecv(const double* w, int count, uint32_t maxSge);

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
  int WireArg(const Napi::CallbackInfo& info, uint32_t maxSge, bool send, const double** w, int* count);

  Napi::Value PostSend(const Napi::CallbackInfo& info);

  // Whether [addr, addr + len) lies in one of this device's registrations (any key: verbs
  // ignores the lkey of inline data).
  bool Registered(uint64_t addr, uint64_t len) const;

  Napi::Value PostRecv(const Napi::CallbackInfo& info);

  const Api* api_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;  // one per device: JS protection domains share it (see README)
  ibv_comp_channel* channel_ = nullptr;
  uint64_t guid_ = 0;
  ibv::DeviceView view_;
  ibv::Route route_{};
  std::mt19937 psnRng_;
  uv_poll_t* compPoll_ = nullptr;
  uv_poll_t* asyncPoll_ = nullptr;
  int nextHandle_ = 1;
  std::map<int, Mr> mrs_;
  std::map<int, Cq> cqs_;
  std::map<int, Qp> qps_;
  std::map<int, Srq> srqs_;
  // Scratch reused by every call: no allocation per post or poll in steady state.
  std::vector<ibv_wc> scratch_;
  std::vector<ibv_send_wr> sendWrs_;
  std::vector<ibv_recv_wr> recvWrs_;
  std::vector<ibv_sge> sges_;
  int wanted_ = 0;  // WRs the current post asked for (WireArg)
};

}  // namespace rdmajs

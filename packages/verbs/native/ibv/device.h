// The ibverbs provider's Node-API adapter: the same handle-based surface as the soft
// provider (see src/internal/native.ts), on libibverbs. JS validates, C++ trusts. Methods
// are defined by concept in device.cc, memory.cc, cq.cc, qp.cc and post.cc.
#pragma once

#include <napi.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
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
using abi::EV_CQ_ERR, abi::EV_DOORBELL, abi::EV_PORT, abi::EV_QP_FATAL, abi::EV_QP_LAST_WQE, abi::EV_SRQ_LIMIT;
using abi::FLAG_INLINE, abi::FLAG_SIGNALED, abi::FLAG_SOLICITED;
using abi::SEND_WR_HEADER_WORDS, abi::SEND_WR_ID, abi::SEND_WR_OPCODE, abi::SEND_WR_FLAGS, abi::SEND_WR_IMM,
    abi::SEND_WR_REMOTE_ADDR, abi::SEND_WR_RKEY, abi::SEND_WR_NUM_SGE, abi::RECV_WR_HEADER_WORDS, abi::RECV_WR_ID,
    abi::RECV_WR_NUM_SGE, abi::SGE_WORDS, abi::SGE_ADDR, abi::SGE_LENGTH, abi::SGE_LKEY;
using abi::ATOMIC_BYTES, abi::ATOMIC_OPERAND_WORDS, abi::OP_ATOMIC_CMP_AND_SWP, abi::OP_ATOMIC_FETCH_AND_ADD, abi::OP_LAST;
using abi::POST_BAD_INLINE, abi::POST_EINVAL, abi::POST_ENOMEM, abi::POST_OK, abi::POST_OTHER;
using abi::QPS_ERR, abi::QPS_INIT, abi::QPS_RESET, abi::QPS_RTR, abi::QPS_RTS;

// The contract says these are libibverbs' own values: passed through unmapped.
static_assert(QPS_RESET == IBV_QPS_RESET && QPS_INIT == IBV_QPS_INIT && QPS_RTR == IBV_QPS_RTR &&
                  QPS_RTS == IBV_QPS_RTS && QPS_ERR == IBV_QPS_ERR,
              "QPS_* are ibv_qp_state values");
static_assert(abi::WCO_SEND == IBV_WC_SEND && abi::WCO_RDMA_WRITE == IBV_WC_RDMA_WRITE &&
                  abi::WCO_RDMA_READ == IBV_WC_RDMA_READ && abi::WCO_COMP_SWAP == IBV_WC_COMP_SWAP &&
                  abi::WCO_FETCH_ADD == IBV_WC_FETCH_ADD && abi::WCO_RECV == IBV_WC_RECV &&
                  abi::WCO_RECV_RDMA_WITH_IMM == IBV_WC_RECV_RDMA_WITH_IMM,
              "WCO_* are ibv_wc_opcode values");
static_assert(abi::WC_FLAG_WITH_IMM == IBV_WC_WITH_IMM, "WC_FLAG_WITH_IMM is IBV_WC_WITH_IMM");
static_assert(abi::ATOMIC_BYTES == sizeof(uint64_t), "verbs atomics are 8 bytes");

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

  // new IbvDevice(name, onEvent, post): `post` is the post record (abi.h)
  explicit IbvDevice(const Napi::CallbackInfo& info);

  ~IbvDevice() override { Teardown(); }

 private:
  friend class DeviceWrap<IbvDevice>;
  RDMAJS_DEVICE_SURFACE

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

  static void OnCompletionEvent(uv_poll_t* p, int status, int);

  static void OnAsyncEvent(uv_poll_t* p, int status, int);

  // routeInfo(port?, gidIndex?): what an endpoint carries — port, LID, GID and its index,
  // path MTU, link layer — for the device's default route or the port/GID a QP asked for.
  Napi::Value RouteInfo(const Napi::CallbackInfo& info);

  // Argument 0 as a handle: a positive integer, or 0 for anything else (not a number, a
  // fraction, out of range), which names no object — never an unchecked conversion.
  static int HandleAt(const Napi::CallbackInfo& info) {
    double d = 0;
    if (info.Length() < 1 || napi_get_value_double(info.Env(), info[0], &d) != napi_ok) return 0;
    return d >= 1 && d <= 2147483647.0 && d == std::floor(d) ? static_cast<int>(d) : 0;
  }

  Cq* CqAt(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return nullptr;
    int h = HandleAt(info);
    auto it = h > 0 ? cqs_.find(h) : cqs_.end();
    if (it != cqs_.end()) return &it->second;
    system_error(info.Env(), kClassName, EBADF, "no such completion queue on this device", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return nullptr;
  }

  // One record per completion, 8 doubles, the layout of src/WorkCompletions.ts. The
  // immediate travels in network order: the receiver sees the number the sender posted.
  static void Encode(const ibv_wc& wc, double* r);

  // Verbs cannot peek: completions are moved to the staging area and counted there.
  size_t Stage(Cq* c);

  Qp* QpAt(const Napi::CallbackInfo& info) {
    if (!Alive(info)) return nullptr;
    int h = HandleAt(info);
    auto it = h > 0 ? qps_.find(h) : qps_.end();
    if (it != qps_.end()) return &it->second;
    system_error(info.Env(), kClassName, EBADF, "no such queue pair on this device", "ERR_RDMA_INVALID_ARG")
        .ThrowAsJavaScriptException();
    return nullptr;
  }

  // addr/length/lkey triples of the wire format.
  static void DecodeSges(const double* w, uint32_t n, ibv_sge* sg);

  // READs this device's QPs accept in flight as responders (max_dest_rd_atomic).
  uint8_t ResponderResources() const { return static_cast<uint8_t>(std::clamp(view_.attr.max_qp_rd_atom, 1, 16)); }

  // Wire format of src/internal/encode.ts, packed back to back: send = wrId, opcode, flags,
  // imm, remoteAddr, rkey, numSge, then addr/length/lkey per SGE.
  ibv_send_wr* DecodeSend(const double* w, int count, uint32_t maxSge);

  // recv = wrId, numSge, then addr/length/lkey per SGE.
  ibv_recv_wr* DecodeRecv(const double* w, int count, uint32_t maxSge);

  // What ibv_post_* returned for a list of `count` WRs, as the soft provider reports it: how
  // many went in (those before `bad`) and the POST_* code.
  template <typename Wr>
  static abi::PostResult Outcome(int rc, Wr* list, Wr* bad, int count) {
    if (rc == 0) return {static_cast<uint32_t>(count), POST_OK};
    if (rc < 0) rc = -rc;  // rxe in rdma-core < 44 returns negative errnos
    auto index = static_cast<uint32_t>(bad && bad >= list && bad - list < count ? bad - list : 0);
    return {index, rc == ENOMEM ? POST_ENOMEM : rc == EINVAL ? POST_EINVAL : POST_OTHER};
  }

  // Checks the wire array (argument 1) and count (argument 2) before anything is decoded:
  // returns the index of the first WR that overruns the array, names more SGEs than the
  // queue takes or an unknown opcode (count when all are well formed), or -1 with a typed
  // error pending when argument 1 is not a Float64Array. The count asked for is wanted_.
  int WireArg(const Napi::CallbackInfo& info, uint32_t maxSge, bool send, const double** w, int* count);

  // Receive WRs (arguments 1 and 2, checked by WireArg) onto a QP's receive queue or, with
  // `srq`, a shared one; the result goes to the post record.
  Napi::Value PostRecvList(const Napi::CallbackInfo& info, ibv_qp* qp, ibv_srq* srq, uint32_t maxSge);

  // Whether [addr, addr + len) lies in one of this device's registrations (any key: verbs
  // ignores the lkey of inline data).
  bool Registered(uint64_t addr, uint64_t len) const;

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

// The soft provider's Node-API adapter: the handle-based surface of src/internal/native.ts
// over soft::Device. JS validates, C++ trusts: every argument has been range-checked in
// TypeScript and arrives as a plain positional number; the checks here keep a bug there
// from reaching memory. Methods are defined by concept in soft_*.cc.
#pragma once

#include <napi.h>
#include <uv.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "addon.h"
#include "device_wrap.h"
#include "soft/device.h"
#include "soft/wire.h"

namespace rdmajs {

class SoftDevice : public rdmajs::DeviceWrap<SoftDevice> {
 public:
  static constexpr napi_type_tag kTypeTag = {0x7264'6d61'6a73'0001ull, 0x736f'6674'6465'7631ull};
  static constexpr const char* kClassName = "SoftDevice";

  static Napi::Function Define(Napi::Env env);

  explicit SoftDevice(const Napi::CallbackInfo& info);
  ~SoftDevice() override { Teardown(); }

 private:
  friend class rdmajs::DeviceWrap<SoftDevice>;
  RDMAJS_DEVICE_SURFACE

  bool Open() const { return dev_ != nullptr; }
  // Events of a batch still reach JS after the handler closed the device (as they always did).
  bool Delivering() const { return true; }

  void Teardown();

  // Before the device goes: registrations whose peers' pins do not drain in time, and what
  // is already quarantined, are kept for the life of the environment (a copy may still be
  // under way into them), never unmapped or released.
  void Retire();

  // Gives back quarantined registrations whose peers' pins have drained since.
  void ReleaseDrained();

  // Runs expired retry/RNR/delay timers and arms the libuv timer for the next one.
  // Inline: on the path of every post and poll; `turn` when the loop's own timer or idle
  // handle runs it (only a turn hands large copies a fresh share, see progressDue).
  void Schedule(bool turn = false) {
    if (!dev_ || !timer_ || !dev_->hasBlocked()) return;
    double next = dev_->progressDue(turn);
    if (next <= 0) return;
    // Armed already to fire no later than `next`: kept, and it re-arms for what is due then
    // (OnTimer). A link WR's ACK deadline moves later with each WR, and every crossing while
    // one is on the wire comes here: decided before reading the clock (two reads per crossing,
    // ≈ 8 per round trip per side on the link's ping-pong). An overdue timer fires in the next
    // turn's timer phase, before the idle step below would run.
    if (timerDue_ > 0 && timerDue_ <= next && uv_is_active(reinterpret_cast<uv_handle_t*>(timer_))) return;
    double now = soft::now_ms();
    double wait = std::max(0.0, std::ceil(next - now));
    // Due now (the next step of a large copy): once per turn of the loop, after its I/O. A
    // 0 ms timer would not do: libuv 1.46 runs a timer re-armed from its own callback again
    // in the same pass, and the whole copy would hold the loop.
    if (wait == 0 && step_) {
      uv_idle_start(step_, &SoftDevice::OnStep);
      return;
    }
    // Armed already to fire no later (due rounds `next` up to the ms): kept, as above; a
    // re-arm each time was a timer-heap removal and insertion per call.
    double due = now + wait;
    if (timerDue_ > 0 && timerDue_ <= due && uv_is_active(reinterpret_cast<uv_handle_t*>(timer_))) return;
    timerDue_ = due;
    uv_timer_start(timer_, &SoftDevice::OnTimer, static_cast<uint64_t>(wait), 0);
  }
  // When the timer armed last fires (ms, soft::now_ms's clock).
  double timerDue_ = 0;

  static void OnTimer(uv_timer_t* t) { static_cast<SoftDevice*>(t->data)->Schedule(true); }
  static void OnStep(uv_idle_t* h) {
    uv_idle_stop(h);
    static_cast<SoftDevice*>(h->data)->Schedule(true);
  }

  static void OnReadable(uv_poll_t* p, int status, int);

  // After this turn's I/O (a check handle; an idle one keeps the loop from blocking
  // meanwhile): the wake-up respond() owes (its own doorbell, rung without the eventfd),
  // then the link's flush if it asked for it. Both crossings come after the ones they
  // follow, so an application that reacts to a completion sends before the answers go.
  void ArmFlush() {
    if (flushArmed_ || !flushCheck_) return;
    flushArmed_ = true;
    uv_check_start(flushCheck_, &SoftDevice::OnFlush);
    uv_idle_start(flushIdle_, [](uv_idle_t*) {});
  }
  static void OnFlush(uv_check_t* h);
  // The doorbell's work: async events and ready CQs to JS.
  void RunDoorbell();
  // Its first half: async events into events_, ready CQs into ready_ (nothing delivered).
  void TakeDoorbell();
  // wakeOwed's work from inside another crossing (respondFrame on a read's last frame): the
  // ready CQs copied into readyOut_ and their count, or -1 when that needs a call into JS
  // (async events, more than one batch): then they stay in events_/ready_ (takenKept_) for
  // wakeOwed() or the next doorbell to deliver.
  int TakeReadyNow();
  // Peers' doorbells a post from JS rings are owed (soft::Device::holdJob) until the JS that
  // posted is over: the end of this device's call into JS it came from (RunDoorbell,
  // OnFlush: the handlers of a wake-up and their microtasks), or else the next prepare
  // phase of the loop, before it polls for I/O and may sleep (a post from a timer, an
  // immediate such as mux's poll loop, a socket's callback). The prepare handle is active
  // (and keeps the loop alive) only while something is owed.
  void HoldJob() {
    dev_->holdJob();
    if (!prepareActive_ && prepare_) {
      prepareActive_ = true;
      uv_prepare_start(prepare_, &SoftDevice::OnPrepare);
    }
  }
  // The JS that posted is over: what it owes rings now.
  void EndJob() {
    if (prepareActive_) {
      prepareActive_ = false;
      uv_prepare_stop(prepare_);
    }
    if (dev_ && dev_->ringHolds() == 0) dev_->releaseJob();
  }
  static void OnPrepare(uv_prepare_t* h) { static_cast<SoftDevice*>(h->data)->EndJob(); }
  // A call into JS (or a post list) holds doorbells while it runs, scoped: released even if
  // the device closed meanwhile (its Device then rang what was owed as it went). The
  // outermost one ends the job (`endsJob`): what its JS posted rings as it returns.
  struct RingHold {
    RingHold(SoftDevice* d, bool endsJob) : self(d), endsJob(endsJob) {
      if (self->dev_) self->dev_->holdRings();
    }
    ~RingHold() {
      if (!self->dev_) return;
      self->dev_->releaseRings();
      if (endsJob) self->EndJob();
    }
    RingHold(const RingHold&) = delete;
    RingHold& operator=(const RingHold&) = delete;
    SoftDevice* self;
    bool endsJob;
  };
  // linkFlushSoon(): the link's flush function once, after this turn's I/O (and respond());
  // linkFlushSoon(false): not owed any more.
  Napi::Value LinkFlushSoon(const Napi::CallbackInfo& info);
  // onLinkFlush(fn): the link's flush function (held here; it reaches the listener only).
  Napi::Value OnLinkFlush(const Napi::CallbackInfo& info);
  // wakeOwed(): the wake-up respond()/linkDone() owe this device's own CQs, taken now (the
  // link calls it at the end of a read, once its frames ran) instead of in the check phase:
  // the ready CQs go into readyOut_ and their count is returned for JS to notify (no callback
  // into JS per read). Nothing owed: 0, nothing done.
  Napi::Value WakeOwed(const Napi::CallbackInfo& info);
  Napi::FunctionReference linkFlush_;

  // Hands ready_ to JS through readyOut_: one EV_CQS_READY call per CQ_READY_BATCH CQs.
  void DeliverReady();

  // ---- arguments: JS validates them; these checks keep a bug there (or a call from
  // elsewhere) from reaching memory as a wrong handle, a short array or a wild length.

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
    Fail(info, EINVAL,
         "argument " + std::to_string(i) + " must be a " + (type == napi_float64_array ? "Float64Array" : "Uint8Array"),
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
    return static_cast<int>(std::min<uint32_t>(U32(info, i), 1u << 22));  // no queue is deeper
  }

  Napi::Value EndpointBase(const Napi::CallbackInfo& info);

  // spinCq(h, us, yieldFirst) → the CQ's count once it is non-zero or `us` µs have passed
  // (0..10^6; 0: one look): a wait's spin in one crossing, with yieldFirst the core given up
  // once first when nothing is there; −(count + 1) when that yield took a time slice (see
  // soft_queues.cc).
  Napi::Value SpinCq(const Napi::CallbackInfo& info);

  // flushDoorbells(): rings the peers' doorbells this device owes now (HoldJob). For a
  // process that exits (process.exit(), an uncaught exception) before its loop turns again:
  // what it posted has reached the peers' CQs, and their wake-ups must not be lost with it.
  Napi::Value FlushDoorbells(const Napi::CallbackInfo& info);

  // stats() → { quarantinedRegions, quarantinedBytes, quarantinedQueues, drainingQpSlots,
  // busyQps, retiredRegions, retiredBytes, doorbellsRung }: memory kept because a peer may
  // still be inside it, QPs a peer is inside an operation on right now, and the peers'
  // doorbells this device has rung (eventfd writes) since it opened.
  Napi::Value Stats(const Napi::CallbackInfo& info);

  // A peer that cannot be reached at connect time: EPERM from pidfd_getfd is the kernel's
  // ptrace access check (Yama ptrace_scope, another user, a no-new-privileges sandbox).
  Napi::Value RtrError(const Napi::CallbackInfo& info, const soft::SysError& se);

  // inject(h, kind: FAULT_*, value): break link, stall receiver (value 0/1), delay (ms),
  // hold the peer's receive-queue lock for good (a process stopped inside it), pin / unpin
  // the peer's MR named by rkey `value` (a copy that does not end), pause `value` ms inside
  // the next deliver() (a slow initiator mid-operation). Another kind: ERR_RDMA_INVALID_ARG.
  Napi::Value Inject(const Napi::CallbackInfo& info);

  // ---- TCP link (the sockets live in JS; these move WRs and answers across)

  // toRtrLink(h, { pid, slot, gen, qpn, minRnrTimer }) → errno (the peer QP's fields)
  Napi::Value ToRtrLink(const Napi::CallbackInfo& info);

  // linkTake(h, hdr: Float64Array(LINK_WORDS), frame: Uint8Array, offset, cap?, defer?)
  //   → LINK_TAKE_* (abi.h); the payload is gathered into frame[offset..] (not when
  //   deferred). Inputs in hdr's LINK_IN_* words (zeroed by the call): with a request id the
  //   request header goes before it, and with a socket the last WR to take now (length ≤
  //   LINK_IN_SEND_MAX) is sent at once with all of frame before it: hdr[LINK_SENT] the bytes
  //   the kernel took (-1: not sent).
  Napi::Value LinkTake(const Napi::CallbackInfo& info);
  static size_t WriteRequestHeader(uint8_t* b, uint32_t reqId, const double* hdr);
  // linkWrite(h, fd, frame: Uint8Array, headerBytes) → bytes written, or -1 (Device::linkWrite)
  Napi::Value LinkWrite(const Napi::CallbackInfo& info);
  // linkSend(fd, buf: Uint8Array, offset, length) → bytes the kernel took now, or −errno
  // (one non-blocking send: what a socket with nothing queued would do, without node's stream)
  Napi::Value LinkSend(const Napi::CallbackInfo& info);

  // The bytes [offset, offset + length) of the Uint8Array argument i and the two after it.
  bool RangeArg(const Napi::CallbackInfo& info, size_t i, const uint8_t** data, size_t* len);

  // linkDone(h, token, outcome | status << 8 | rnrTimer << 16, data?: Uint8Array, offset, length)
  Napi::Value LinkDone(const Napi::CallbackInfo& info);
  // linkProgress(h): bytes moved on the connection carrying this QP's frames
  Napi::Value LinkProgress(const Napi::CallbackInfo& info);

  // respond(record: Float64Array(RESPOND_WORDS), buf: Uint8Array, offset, length) → the
  //   LINK_* outcome, the payload being buf[offset, offset + length);
  //   the record's RESPOND_OUTCOME/STATUS/RNR_TIMER get the answer (abi.h). For READ,
  //   `payload` receives the data.
  Napi::Value Respond(const Napi::CallbackInfo& info);
  // place(record, buf: Uint8Array, offset, length, at) → true when buf[offset, offset + length)
  //   went to bytes [at, at + length) of the RDMA WRITE the record names (RESPOND_PLACED: its
  //   whole length), after respond's checks for the whole range; false, nothing written, else.
  Napi::Value Place(const Napi::CallbackInfo& info);
  bool RespondArgs(const Napi::CallbackInfo& info, const char* who, double** record, const uint8_t** bytes,
                   size_t* len);
  // respondFrame(record: Float64Array(FRAME_WORDS), frame: Uint8Array, out: Uint8Array) → the
  //   LINK_* outcome, or FRAME_NOT_RUN: the common request (a SEND or WRITE of the pair and
  //   token the record names) parsed, checked, run and answered (header into `out`) in one
  //   crossing; nothing done when it is not one (abi.h FRAME_*).
  Napi::Value RespondFrame(const Napi::CallbackInfo& info);
  // A link request header's fields (frames.ts's layout), from peer bytes.
  struct LinkRequest {
    uint32_t frameLen, reqId, imm, rkey, length, slot, gen, srcQpn, srcPid, token;
    uint8_t opcode, flags;
    uint64_t remoteAddr;
    double remoteAddrWire;  // as it came (JS compares a resend's with Object.is)
  };
  // Parses the request header of the frame b[0, avail) into r: false when it is malformed (the
  // checks of frames.ts checkRequestHeader, and a frame length that is not exactly `avail`).
  static bool ReadRequestHeader(const uint8_t* b, size_t avail, LinkRequest* r);

  std::unique_ptr<soft::Device> dev_;
  std::vector<uint32_t> ready_;                // CQs a doorbell found ready
  Napi::Reference<Napi::Uint32Array> readyOut_;  // JS's view of them (CQ_READY_BATCH entries)
  uv_poll_t* poll_ = nullptr;
  uv_timer_t* timer_ = nullptr;
  uv_idle_t* step_ = nullptr;  // active only while a large copy has a step due
  uv_prepare_t* prepare_ = nullptr;  // active only while peers' doorbells are owed (HoldJob)
  bool prepareActive_ = false;
  uv_check_t* flushCheck_ = nullptr;
  uv_idle_t* flushIdle_ = nullptr;
  bool flushArmed_ = false;
  bool doorbellOwed_ = false;   // respond() rang this device's own doorbell
  bool takenKept_ = false;      // TakeReadyNow took a doorbell it could not hand over
  bool linkFlushOwed_ = false;  // the link asked for EV_LINK_FLUSH
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
    uint32_t slot;                              // the MR slot whose pins it waits for
    Mapping* mapping;                           // allocMr memory, kept mapped
    Napi::Reference<Napi::ArrayBuffer> buffer;  // regMr memory, kept referenced
    uint64_t bytes;
  };
  std::vector<Held> quarantine_;
};

}  // namespace rdmajs

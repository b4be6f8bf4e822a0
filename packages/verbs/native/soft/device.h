// The soft provider's engine: one per opened device, driven by its owner's thread.
// The initiator carries out every operation itself against the peer's shared segment
// (take its receive WQE, copy, post its completion, ring its doorbell), so nothing
// waits for the target's event loop. No N-API in here: ../soft_device.h adapts it.
#pragma once

#include <sys/types.h>

#include <sys/uio.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../abi.h"
#include "layout.h"
#include "segment.h"

namespace soft {

// Post results (how many WRs were posted, and the POST_* code) and event kinds are the
// contract's (../abi.h).
using rdmajs::abi::EV_DOORBELL, rdmajs::abi::EV_QP_FATAL, rdmajs::abi::EV_CQ_ERR, rdmajs::abi::EV_SRQ_LIMIT,
    rdmajs::abi::EV_LINK, rdmajs::abi::EV_QP_LAST_WQE;
using rdmajs::abi::POST_OK, rdmajs::abi::POST_EINVAL, rdmajs::abi::POST_ENOMEM, rdmajs::abi::POST_BAD_INLINE,
    rdmajs::abi::POST_BUSY;
using rdmajs::abi::PostResult;  // how many WRs of a batch were posted, and the POST_* code
// The TCP link's header words and linkTake's codes.
using rdmajs::abi::LINK_OPCODE, rdmajs::abi::LINK_IMM, rdmajs::abi::LINK_REMOTE_ADDR, rdmajs::abi::LINK_RKEY,
    rdmajs::abi::LINK_LENGTH, rdmajs::abi::LINK_DST_SLOT, rdmajs::abi::LINK_DST_GEN, rdmajs::abi::LINK_SRC_QPN,
    rdmajs::abi::LINK_SRC_PID, rdmajs::abi::LINK_TOKEN, rdmajs::abi::LINK_HEAD, rdmajs::abi::LINK_SOLICITED;
using rdmajs::abi::LINK_TAKE_NONE, rdmajs::abi::LINK_TAKE_READY, rdmajs::abi::LINK_TAKE_NEEDS_BUFFER,
    rdmajs::abi::LINK_TAKE_LAST;

// The target's answer to an operation that arrived over the TCP link (respond): a LINK_*
// outcome, the ibv_wc_status of a done one, and the QP's min_rnr_timer for an RNR.
struct Answer {
  int outcome;
  uint8_t status;
  uint32_t rnrTimer;
};

// A send queue's WRs are numbered by a 64-bit sequence that never wraps (the slot of seq s is
// s % maxSendWr, for any maxSendWr). Every QP starts just below 2^32, so every QP the tests
// use crosses the 32-bit boundary of the two places a sequence leaves as 32 bits: a CQE's
// sqSeq and the TCP link's token.
inline constexpr uint64_t kSendSeqStart = 0xfffffff0ull;
// The 32-bit name of send seq s, 1 … 2^32 − 1 in turn (0 means "none" in a CQE and on the
// link): a CQE's sqSeq and the link's token.
inline constexpr uint64_t kSendTokens = 0xffffffffull;
inline uint32_t send_token(uint64_t seq) { return static_cast<uint32_t>(seq % kSendTokens) + 1; }
// How many WRs after `before` the WR named `token` is (0 … kSendTokens − 1).
inline uint64_t tokens_after(uint64_t before, uint32_t token) {
  return (static_cast<uint64_t>(token) + kSendTokens - send_token(before)) % kSendTokens;
}

struct SendEntry {
  uint64_t wrId;
  uint64_t remoteAddr;
  uint32_t rkey;
  uint32_t imm;
  uint64_t operands[2];  // atomics: compare_add, swap
  uint8_t opcode;        // OP_* of ../abi.h
  uint8_t signaled;
  uint8_t isInline;
  uint8_t solicited;  // IBV_SEND_SOLICITED: the receiver's completion wakes a solicited-only arm
  uint8_t done;  // executed (completed or silently succeeded)
  uint32_t numSge;
  uint64_t seq;       // the send queue's sequence (kSendSeqStart)
  uint32_t idx;       // seq % maxSendWr: its place in sq, sqSge and sqInline
  int32_t rnrLeft;    // -1 = infinite
  int32_t retryLeft;  // -1 = infinite
  bool started;       // retry counters initialised
  double readyAt;     // injected delay: not before this time (ms)
  uint32_t inlineLen;
  uint64_t placed;    // a large WRITE/READ moves in steps: bytes already moved
};

struct Peer;
class MrPins;

// One read of an MR entry: a peer may rewrite its table at any time, so every check and
// every later use (direct mappings) works on this copy, never on the shared entry again.
struct MrView {
  uint64_t addr, length;
  uint32_t access;
  int32_t memfd;
  uint64_t regionId;
  uint32_t slot;
};

struct Qp {
  uint32_t slot;
  uint32_t gen;
  int sendCq, recvCq, srq;  // handles
  uint64_t sendCqOff = 0;   // CqShared of sendCq (a CQ in use cannot be destroyed)
  uint32_t maxSendWr, maxRecvWr, maxSendSge, maxRecvSge, maxInline;
  uint64_t rqOff = 0;  // own receive queue (0 with an SRQ)
  std::vector<SendEntry> sq;
  std::vector<WireSge> sqSge;     // maxSendSge per entry
  std::vector<uint8_t> sqInline;  // maxInline per entry
  uint64_t sqHead = kSendSeqStart;     // next to execute (seq)
  uint64_t sqTail = kSendSeqStart;     // next to post (seq)
  uint64_t sqRetired = kSendSeqStart;  // seq below which slots are free
  // connection
  std::shared_ptr<PeerSegment> peer;
  uint32_t peerSlot = 0, peerGen = 0, peerQpn = 0;
  uint32_t minRnrTimer = 12, timeout = 14, retryCount = 7, rnrRetry = 7;
  double delayMs = 0;       // injected per-operation delay
  double pauseMs = 0;       // injected: the next operation stops this long inside deliver()
  double blockedUntil = 0;  // > 0 while the head WR waits for a timer
  // TCP link (peer on another host, or chosen for tests): WRs travel as frames, several in
  // flight, answered in order; [sqHead, linkSent) are on the wire.
  bool link = false;
  bool linkReady = false;      // head WR waits for JS to take it (linkTake)
  uint64_t linkSent = kSendSeqStart;  // seq of the next WR linkTake hands out
  uint64_t linkDeferred = 0;          // seq + 1 of the WR linkTake took without its payload (linkWrite)
  uint32_t linkRnrTimer = 12;  // the responder's min_rnr_timer, from its last RNR answer
  // On an SRQ: LAST_WQE_REACHED is owed (entered ERR) / was raised for this error (once per
  // ERR, until a reset).
  bool lastWqeOwed = false, lastWqeRaised = false;
  bool linkOnWire() const { return linkSent != sqHead; }
};

struct Mr {
  uint32_t slot;
  uint32_t key;
  uint64_t addr, length;
  uint32_t access;
};

struct DeviceLimits {
  static constexpr uint32_t maxQpWr = 16384, maxSge = 32, maxCqe = 1u << 20, maxInline = 1024, maxSrqWr = 16384;
  static constexpr uint64_t maxMsg = 1ull << 30, maxMrSize = 1ull << 40;
};

class Device {
 public:
  Device();
  ~Device();

  OwnSegment& segment() { return seg_; }
  pid_t pid() const { return pid_; }

  // Memory regions. Keys double as lkey and rkey.
  int regMr(uint64_t addr, uint64_t length, uint32_t access, int memfd, uint32_t* keyOut);
  // False when a peer's pin outlived the bound: the slot is quarantined (pinnedMrSlots_)
  // and so must the caller keep the memory, until drainMrSlots() names the slot.
  bool deregMr(int handle, uint32_t* slotOut = nullptr);
  // Invalidates every MR and waits for peers' copies to finish: called before the owner
  // unmaps or frees registered memory on close.
  // Close, step 1: every QP vanishes for peers (RESET, new gen), so what fails after this
  // is a missing responder (RETRY_EXC_ERR), never an access error. Then revokeMrs.
  void quiesceQps();
  void revokeMrs(std::vector<int>* stuck = nullptr);  // handles whose pins did not drain
  void drainMrSlots(std::vector<uint32_t>* freed);    // quarantined slots whose pins drained
  struct Quarantine {
    uint32_t mrSlots, queueBlocks, qpSlots;
  };
  Quarantine quarantine() const;

  // Handles from JS are checked before use (a stale or foreign handle is an error, never a
  // lookup that throws under NAPI_DISABLE_CPP_EXCEPTIONS).
  bool hasQp(int h) const { return qps_.count(h) != 0; }
  bool hasCq(int h) const { return cqs_.count(h) != 0; }
  bool hasSrq(int h) const { return srqs_.count(h) != 0; }

  int createCq(uint32_t capacity);
  int destroyCq(int h);  // 0, or EBUSY while a QP uses it (as ibv_destroy_cq)
  uint32_t cqCapacity(int h);
  // 8 doubles per completion. armIfEmpty: a poll that finds none arms the CQ for the next
  // completion (armCq's work, same crossing) — for a caller that waits next.
  int pollCq(int h, double* out, int max, bool armIfEmpty = false);
  uint32_t cqCount(int h);
  // Arms, then returns what is already there; an armed, empty CQ is watched by the doorbell
  // until it has a completion (onDoorbell reports it once, as ibv_req_notify_cq does).
  // Arms CQ h for the next completion, or (solicitedOnly) the next solicited or failed one;
  // returns the completions already there (then the arm is used up).
  uint32_t armCq(int h, bool solicitedOnly);

  int createSrq(uint32_t maxWr, uint32_t maxSge);
  int destroySrq(int h);  // 0, or EBUSY while a QP uses it
  // `words` is the length of `wrs`: a WR that does not fit, or names more SGEs than the
  // queue takes, is refused (POST_EINVAL at its index) instead of being read past the end.
  PostResult postSrqRecv(int h, const double* wrs, size_t words, int count);
  void armSrqLimit(int h, uint32_t limit);

  int createQp(int sendCq, int recvCq, int srq, uint32_t maxSendWr, uint32_t maxRecvWr, uint32_t maxSendSge,
               uint32_t maxRecvSge, uint32_t maxInline);
  void destroyQp(int h);
  uint32_t qpNum(int h);
  uint32_t qpSlot(int h);
  uint32_t qpGen(int h);
  uint32_t qpState(int h);
  // Transitions; return 0 or an errno.
  int toInit(int h, uint32_t access);
  int toRtr(int h, pid_t peerPid, int peerMemfd, int peerEventfd, uint64_t peerNonce, uint32_t peerSlot,
            uint32_t peerGen, uint32_t peerQpn, uint32_t minRnrTimer, const SysError** sysErr);
  int toRts(int h, uint32_t timeout, uint32_t retryCount, uint32_t rnrRetry);
  int toErr(int h);
  int toReset(int h);
  PostResult postSend(int h, const double* wrs, size_t words, int count);

  // TCP link. toRtrLink binds a QP to a peer reached over TCP (no segment mapping).
  int toRtrLink(int h, uint32_t peerPid, uint32_t peerSlot, uint32_t peerGen, uint32_t peerQpn, uint32_t minRnrTimer);
  // Takes the next WR for the wire (the head, then up to kLinkWindow behind it): header
  // doubles into `hdr` (LINK_* words) and the gathered payload into `payload`
  // (WRITE/SEND, atomics' operands). LINK_TAKE_READY taken, LINK_TAKE_NONE nothing ready,
  // LINK_TAKE_NEEDS_BUFFER: `payload` must hold hdr[LINK_LENGTH] bytes (nothing taken).
  // LINK_TAKE_LAST: taken, and nothing more can be now (linkTakeable false). `defer`: a
  // WRITE/SEND's payload is not gathered (linkWrite sends it next), only its length checked.
  int linkTake(int h, double* hdr, uint8_t* payload, size_t cap, bool defer = false);
  // The WR linkTake just took deferred goes straight from its registered memory to the
  // socket `fd`: its header (frame[0, hdrBytes)) and payload in one non-blocking sendmsg,
  // no copy of what the kernel takes; what it does not take is copied into `frame` after
  // the header, at its place, for JS to write. The bytes written (header included, 0 when
  // the socket is full or failed: JS's own write then reports it), or -1 when no WR was
  // taken deferred or `frame` cannot hold it.
  int64_t linkWrite(int h, int fd, uint8_t* frame, size_t hdrBytes, size_t frameBytes);
  // True when linkTake could hand out a WR now (it may still find its memory gone).
  bool linkTakeable(int h);
  // True once since the last call if respond() rang this device's own doorbell (it does
  // not write the eventfd: the caller delivers the wake-up).
  bool takeSelfRing() {
    bool r = selfRung_;
    selfRung_ = false;
    return r;
  }
  // Set while JS is inside a call after which it takes the QP's ready WRs itself (post,
  // linkDone): the doorbell is then not rung for them (a syscall and a wake-up per WR).
  bool jsTakesLink = false;
  // Set while the addon delivers this device's own wake-up itself after the call (linkDone):
  // ringSelf only notes it (takeSelfRing), no eventfd round trip.
  bool deferSelfRing = false;
  // The peer's answer for a taken WR (outcome, status, RNR timer, READ data).
  // Returns linkTakeable(h): whether JS has WRs to take after it.
  bool linkDone(int h, uint32_t token, int outcome, uint8_t status, uint32_t rnrTimer, const uint8_t* data, size_t len);
  // The connection carrying this QP's frames moved bytes: its ACK timer starts again.
  void linkProgress(int h);
  // Runs an operation that arrived over TCP against local QP `slot` (for READ, `payload`
  // receives the data; for an atomic, the prior value is written over its operands).
  // `placed`: an RDMA WRITE of `len` bytes that place() already put into memory (`payload`
  // unused): every check runs again, nothing is copied. `solicited`: the request carried
  // LINK_FLAG_SOLICITED (its receive completion wakes a solicited-only arm).
  Answer respond(uint32_t slot, uint32_t gen, uint8_t opcode, uint8_t* payload, size_t len, uint32_t imm,
                 uint64_t remoteAddr, uint32_t rkey, uint32_t srcQpn, uint32_t srcPid, bool placed, bool solicited);
  // Puts bytes [at, at + n) of an RDMA WRITE of `total` bytes arriving over TCP straight into
  // local QP `slot`'s target memory, after the checks respond makes for the whole range (QP
  // incarnation and state, source QP, REMOTE_WRITE on QP and region, key, bounds). False,
  // with nothing written, when any fails (respond then gives the answer). n = 0: checks only.
  bool place(uint32_t slot, uint32_t gen, uint64_t remoteAddr, uint32_t rkey, uint64_t total, uint32_t srcQpn,
             uint32_t srcPid, uint64_t at, const uint8_t* bytes, size_t n);
  PostResult postRecv(int h, const double* wrs, size_t words, int count);

  // Fault injection.
  void injectBreakLink(int h);
  void injectStall(int h, bool on);
  void injectDelay(int h, double ms);
  // Takes the lock of the connected peer's receive queue (unless this process holds it).
  // ms = 0: never lets go, what a process stopped (SIGSTOP, a debugger) inside take_rq
  // leaves behind once stopped. ms > 0: holds it `ms` more inside this call, then lets go,
  // as a holder preempted inside its section. For liveness tests.
  void injectHoldPeerLock(int h, double ms);
  // Takes (hold) or drops a pin on the connected peer's MR `rkey`: a copy stuck mid-way.
  void injectPeerPin(int h, uint32_t rkey, bool hold);
  // The next operation of QP h stops `ms` inside deliver(), after its checks of the target
  // and before its access checks: the window in which the target may reset and reconnect.
  void injectPauseInDeliver(int h, double ms) { qp(h)->pauseMs = ms; }
  // QPs of this device some peer is inside an operation on right now (QpShared::pins).
  uint32_t busyQps();

  // Event loop side: called on doorbell; returns the rare (kind, handle) pairs to report and
  // the armed CQs that now hold completions (each disarmed). Touches only armed CQs and
  // QPs with link work, and everything else only when a peer flagged attention.
  void onDoorbell(std::vector<std::pair<int, int>>& events, std::vector<uint32_t>& readyCqs);
  // Runs WRs whose timer expired; returns the earliest pending deadline (ms) or 0.
  // `turn`: called by the loop's own turn (the timer/idle handle), which hands large copies
  // a fresh share of kCopyTurnMs; a poll between turns gets one only once a share's length
  // has passed since the last ended (see send.cc).
  double progressDue(bool turn);
  bool hasBlocked() const { return blockedCount_ > 0; }
  void ringSelf();

  // Doorbells held back for a batch. While a hold is on, a peer's doorbell is owed instead
  // of rung, and rung once when the last hold ends. A peer woken by the first SEND of a
  // batch took that one alone and armed again, and its wake-up preempted the poster in the
  // middle of the batch (a context switch per few messages at 16 in flight); held, the batch
  // lands whole and costs one wake-up. Scoped holds (holdRings/releaseRings: a post list, a
  // call into JS with its microtasks) nest; the job hold (holdJob/releaseJob) is JS's: from
  // its first post until the JS job that posted and its microtasks end. A wait inside a
  // hold cannot miss the answer: a CQ looked at empty twice, and every spinCq, ring what is
  // owed first (the peer may be what it waits for).
  void holdRings() { ringHolds_++; }
  void releaseRings() {
    if (ringHolds_ > 0 && --ringHolds_ == 0 && !jobHeld_) ringOwed();
  }
  int ringHolds() const { return ringHolds_; }
  void holdJob() { jobHeld_ = true; }
  void releaseJob() {
    jobHeld_ = false;
    if (ringHolds_ == 0) ringOwed();
  }
  // Rings every owed doorbell now (holds stay on).
  void ringOwed();
  // A CQ was found empty: the caller may wait for a peer whose doorbell is owed.
  void lookedEmpty() {
    if (!owedRings_.empty() && ++emptyLooks_ >= 2) ringOwed();
  }
  // Peer doorbells rung (eventfd writes) since the device opened (stats).
  uint64_t ringsRung() const { return ringsRung_; }

 private:
  // DONE, RNR and TRANSPORT travel on the TCP link: their numbers are the contract's.
  enum Outcome {
    DONE = rdmajs::abi::LINK_DONE,
    RNR = rdmajs::abi::LINK_RNR,
    TRANSPORT = rdmajs::abi::LINK_TRANSPORT,
    DISCARDED = rdmajs::abi::LINK_DISCARDED,
    DELAY = 4,
    LINK = 5,
    PARTIAL = 6  // one step of a large WRITE/READ done: the rest after the event loop ran
  };
  struct CqRef {
    uint8_t* base;
    CqShared* cq;
    PeerSegment* peer;
  };

  Qp* qp(int h);
  CqShared* cqAt(int h);
  void readyCqs(std::vector<uint32_t>& ready);  // the watched CQs that hold completions
  RecvQueue* rq(uint64_t off) { return reinterpret_cast<RecvQueue*>(seg_.base() + off); }
  QpShared* qpShared(uint32_t slot);
  MrEntry* mrEntry(uint32_t slot);

  void progress(Qp& q);
  Outcome execute(Qp& q, SendEntry& e, uint8_t* status, uint32_t* byteLen);
  // Executes a run of small READs at the head of `q`'s send queue, all through one key of
  // the peer's, under one check of the peer and one pin of its QP and region; returns how
  // many it completed. It stops (and progress() takes the WR the generic way, which then
  // fails or completes it with exactly the usual status) at anything but a plain success.
  uint32_t readRun(Qp& q);
  void prefetchAhead(const Qp& q, uint32_t rkey, const MrView& v, const uint8_t* base) const;
  // The responder half of an operation, shared by the shared-memory path (the initiator
  // runs it against the peer's segment) and the TCP link (the target runs it on itself).
  // `solicited`: the WR's IBV_SEND_SOLICITED (over the link: the request's LINK_FLAG_SOLICITED).
  Outcome deliver(PeerSegment* p, QpShared* t, uint32_t gen, uint8_t opcode, iovec* local, size_t nl, uint64_t total,
                  uint32_t imm, uint64_t remoteAddr, uint32_t rkey, uint32_t srcQpn, uint32_t srcPid, uint8_t* status,
                  const uint64_t* operands, uint64_t msgLen, bool placed, bool solicited);
  // deliver's first checks, shared with place(): the target QP `t` (pinned by the caller)
  // is still incarnation `gen`, can receive (RTR/RTS) and is connected to (srcPid, srcQpn).
  // `word`: the state word checked.
  bool acceptsFrom(QpShared* t, uint32_t gen, uint32_t srcQpn, uint32_t srcPid, uint32_t* word);
  // deliver's checks of an RDMA WRITE/READ's target range, shared with place(): `need` is the
  // remote access it takes. WC_SUCCESS with `view` filled (nothing to check for len 0), or the
  // status the operation fails with.
  uint8_t checkRemote(QpShared* t, MrPins& pins, uint32_t need, uint32_t rkey, uint64_t addr, uint64_t len,
                      MrView* view);
  // The local QP a request over the link names (respond, place): slot in range, still
  // incarnation `gen`, link not broken; null otherwise.
  QpShared* linkTarget(uint32_t slot, uint32_t gen);
  // This device as a peer of its own (the TCP link's target runs operations on itself), or
  // null when its segment cannot be opened.
  PeerSegment* selfPeer();
  // The next step of a WRITE/READ larger than kCopyStep (pieces of kCopyStep bytes until
  // copyTurnUntil_), or an outcome that ends it; every step checks the whole remote range
  // again (a region deregistered mid-way fails the operation, as on a NIC), and every piece
  // holds its pins only while it moves.
  Outcome step(Qp& q, SendEntry& e, PeerSegment* p, QpShared* t, iovec* local, size_t nl, uint64_t total,
               uint8_t* status);
  // The target half of an atomic on memory checked by deliver: the prior value goes to `local`.
  Outcome atomic(PeerSegment* p, QpShared* t, uint32_t word, uint8_t opcode, iovec* local, size_t nl,
                 uint64_t remoteAddr, uint32_t rkey, MrPins& pins, const uint64_t* operands, uint8_t* status);
  // Applies an outcome to the head WR; returns true when progress may go on.
  bool settle(Qp& q, SendEntry& e, Outcome o, uint8_t status, uint32_t len, uint32_t rnrTimer);
  // The local iovecs of a WR (inline copy or checked SGEs); false with `status` set on error.
  bool gatherLocal(Qp& q, SendEntry& e, iovec* local, size_t* nl, uint64_t* total, uint8_t* status);
  std::shared_ptr<PeerSegment> selfPeer_;
  // Rings `p`'s doorbell, or owes it while a hold is on (holdRings).
  void ringPeer(const PeerSegment* p);
  int ringHolds_ = 0;
  bool jobHeld_ = false;
  uint32_t emptyLooks_ = 0;  // CQs looked at empty since the last ringOwed
  std::vector<std::shared_ptr<const PeerSegment>> owedRings_;
  uint64_t ringsRung_ = 0;
  void completeSend(Qp& q, SendEntry& e, uint8_t status, uint32_t byteLen);
  void flushQp(Qp& q);
  void moveToError(Qp& q);
  enum Push { PUSHED, PUSH_FULL, PUSH_BUSY };
  Push pushCqe(uint8_t* base, CqShared* cq, const Cqe& e, const PeerSegment* peer, int64_t budgetNs = kLockWaitNs);
  void flushRecvQueue(uint8_t* base, RecvQueue* rq, uint64_t cqOff, uint32_t qpNum, const PeerSegment* peer);
  void remoteFail(PeerSegment* p, QpShared* target, uint32_t word);
  void block(Qp& q, double untilMs);
  void unblock(Qp& q);  // no-op when not blocked
  // Translates a peer's registered range into this process's mapping, if it has one.
  void* direct(PeerSegment* p, const MrView& v, uint64_t addr);

  OwnSegment seg_;
  pid_t pid_;
  uint64_t holder_;  // this process in a shared lock's word: holder_word(pid, start time)
  int nextHandle_ = 1;
  std::map<int, Mr> mrs_;
  struct CqRec {
    uint64_t off;        // CqShared offset
    uint32_t users = 0;  // QPs sending or receiving through it
    bool errReported = false;
    bool watched = false;  // in armedCqs_
    uint32_t arm = ARM_NONE;  // what it was armed for, while watched
    bool tainted = false;  // a QP of it was destroyed with a peer still inside: quarantine on destroy
  };
  struct SrqRec {
    uint64_t off;  // RecvQueue offset
    uint32_t users = 0;
    bool tainted = false;
  };
  std::map<int, CqRec> cqs_;
  std::vector<int> armedCqs_;  // armed while empty: what a doorbell checks (destroyed ones dropped there)
  bool linkAttention_ = false;  // some QP may have its head WR ready for the link
  bool selfRung_ = false;       // respond() or a deferred ringSelf() rang this device's own doorbell
  bool lastWqeAttention_ = false;  // some QP on an SRQ owes LAST_WQE_REACHED
  void oweLastWqe(Qp& q);
  std::map<int, SrqRec> srqs_;
  std::map<int, std::unique_ptr<Qp>> qps_;
  std::map<std::pair<pid_t, uint64_t>, std::weak_ptr<PeerSegment>> peers_;  // by (pid, nonce)
  std::vector<uint32_t> freeQpSlots_;
  std::vector<bool> mrSlotFree_;  // MR table slots neither in use nor quarantined
  std::mt19937_64 mrKeys_;        // random keys (seeded from the kernel)
  std::map<uint32_t, uint32_t> injectedPins_;  // test hook: peer rkey → slot it pinned
  std::vector<uint32_t> drainingSlots_;
  std::vector<uint32_t> pinnedMrSlots_;  // deregistered MRs whose peers' pins have not drained  // destroyed QPs whose
                                         // peers' pins have not drained
  bool drainPins(QpShared* s);           // waits (bounded) until no initiator is inside
  bool pickMrSlot(uint32_t* keyOut, uint32_t* slotOut);
  bool revokeSlot(uint32_t slot);        // false: a pin outlived its deadline (peer died mid-copy)
  std::vector<Qp*> qpBySlot_;
  // Shared blocks that may still be written by a peer (its lock or pin outlived the
  // bound): never freed or reused while this device lives. `bytes` 0 = a queue block.
  struct Quarantined {
    uint64_t off;
    uint64_t bytes;
  };
  std::vector<Quarantined> quarantined_;
  int blockedCount_ = 0;
  double nextDeadline_ = 0;
  double copyTurnUntil_ = 0;  // end of this turn's share for large copies (see kCopyTurnMs)
  double pauseNextDeliverMs_ = 0;  // earliest blockedUntil (a lower bound while blocked)
  uint64_t regionCounter_ = 0;
};

double now_ms();

}  // namespace soft

// Shared-memory layout of a soft device. One memfd segment per device holds every
// object a peer process must reach to carry out an operation by itself: the MR table
// (key checks), QP descriptors (state, access, receive queue), receive queues, SRQs and
// completion queues. Peers map it after pidfd_getfd(); all fields are fixed-size and
// addressed by offsets, never by pointers.
#pragma once

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "../abi.h"
#include "holder.h"

namespace soft {

constexpr uint64_t kMagic = 0x31534a414d445200ull;  // "\0RDMAJS1"
constexpr uint32_t kLayoutVersion = 6;  // 2: MrEntry::pins; 3: QP incarnations and pins; 4: attention;
                                        // 5: lock words hold (pid, start time), header procView;
                                        // 6: mr_home by multiply-shift (keys' home slots moved)
constexpr uint64_t kSegmentBytes = 256ull << 20;    // virtual; memfd pages are allocated on touch
constexpr uint32_t kMrSlots = 16384;
constexpr uint32_t kQpSlots = 4096;

// ibverbs numeric values, so completions read the same on both providers.
enum WcStatus : uint8_t {
  WC_SUCCESS = 0,
  WC_LOC_LEN_ERR = 1,
  WC_LOC_QP_OP_ERR = 2,
  WC_LOC_PROT_ERR = 4,
  WC_WR_FLUSH_ERR = 5,
  WC_REM_INV_REQ_ERR = rdmajs::abi::WC_REM_INV_REQ_ERR,
  WC_REM_ACCESS_ERR = 10,
  WC_REM_OP_ERR = 11,
  WC_RETRY_EXC_ERR = 12,
  WC_RNR_RETRY_EXC_ERR = 13,
};
// The numbers shared with JS are the contract's (../abi.h), used by their names there.
using rdmajs::abi::OP_SEND, rdmajs::abi::OP_SEND_WITH_IMM, rdmajs::abi::OP_RDMA_WRITE,
    rdmajs::abi::OP_RDMA_WRITE_WITH_IMM, rdmajs::abi::OP_RDMA_READ, rdmajs::abi::OP_ATOMIC_CMP_AND_SWP,
    rdmajs::abi::OP_ATOMIC_FETCH_AND_ADD, rdmajs::abi::OP_LAST, rdmajs::abi::ATOMIC_OPERAND_WORDS,
    rdmajs::abi::ATOMIC_BYTES, rdmajs::abi::FLAG_SIGNALED, rdmajs::abi::FLAG_INLINE,
    rdmajs::abi::FLAG_SOLICITED, rdmajs::abi::LINK_NO_RNR;
using rdmajs::abi::SEND_WR_HEADER_WORDS, rdmajs::abi::SEND_WR_ID, rdmajs::abi::SEND_WR_OPCODE, rdmajs::abi::SEND_WR_FLAGS,
    rdmajs::abi::SEND_WR_IMM, rdmajs::abi::SEND_WR_REMOTE_ADDR, rdmajs::abi::SEND_WR_RKEY, rdmajs::abi::SEND_WR_NUM_SGE,
    rdmajs::abi::RECV_WR_HEADER_WORDS, rdmajs::abi::RECV_WR_ID, rdmajs::abi::RECV_WR_NUM_SGE, rdmajs::abi::SGE_WORDS,
    rdmajs::abi::SGE_ADDR, rdmajs::abi::SGE_LENGTH, rdmajs::abi::SGE_LKEY;
using rdmajs::abi::QPS_RESET, rdmajs::abi::QPS_INIT, rdmajs::abi::QPS_RTR, rdmajs::abi::QPS_RTS, rdmajs::abi::QPS_ERR;
using rdmajs::abi::WCO_SEND, rdmajs::abi::WCO_RDMA_WRITE, rdmajs::abi::WCO_RDMA_READ, rdmajs::abi::WCO_COMP_SWAP,
    rdmajs::abi::WCO_FETCH_ADD, rdmajs::abi::WCO_RECV,
    rdmajs::abi::WCO_RECV_RDMA_WITH_IMM, rdmajs::abi::WC_FLAG_WITH_IMM;
enum AccessFlags : uint32_t { ACC_LOCAL_WRITE = 1, ACC_REMOTE_WRITE = 2, ACC_REMOTE_READ = 4, ACC_REMOTE_ATOMIC = 8 };

// The two atomics: an 8-byte read-modify-write of the target, the prior value returned.
inline bool is_atomic(uint32_t op) { return op == OP_ATOMIC_CMP_AND_SWP || op == OP_ATOMIC_FETCH_AND_ADD; }
// The operations that consume a receive at the target (and so may be solicited).
inline bool consumes_recv(uint32_t op) {
  return op == OP_SEND || op == OP_SEND_WITH_IMM || op == OP_RDMA_WRITE_WITH_IMM;
}

// How long a lock in a shared segment is waited for before its holder is looked at.
// Critical sections are a few instructions, so a holder that keeps it longer was
// preempted (a loaded host: tens of ms are common), is stopped (SIGSTOP, a debugger) or
// died. Short for waits that can be retried cleanly (nothing consumed yet); longer for the
// completion of a receive already taken, whose loss would fail the connection.
constexpr int64_t kLockWaitNs = 20'000'000;       // 20 ms
constexpr int64_t kCommitWaitNs = 1'000'000'000;  // 1 s
// Past kLockWaitNs a waiter looks at the holder: a dead one's lock is taken over, a stopped
// one's is given up at once; one that runs (preempted, descheduled, in a page fault) is
// waited for until the caller's budget ends. Calls on the JS thread keep the short budget, so
// one refused call blocks it 20 ms at most and its caller retries later (mux backs off); only
// the commit of a receive already taken waits up to kCommitWaitNs.
// Backoff of a wait past the spin phase: sleeps from 20 µs up to 1 ms, so a preempted
// holder gets the core the waiter would otherwise burn (sched_yield alone often does not
// give it: the holder may be queued on this very core).
constexpr int64_t kLockNapMinNs = 20'000;
constexpr int64_t kLockNapMaxNs = 1'000'000;

inline int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline void nap_ns(int64_t ns) {
  timespec ts{0, static_cast<long>(ns)};
  nanosleep(&ts, nullptr);  // woken early by a signal: the caller's loop looks again
}

// A tiny inter-process spinlock. The word holds the holder's identity (holder_word: pid and
// start time), so a waiter can tell a holder that died inside its (very short) critical
// section, and take the lock over, or one stopped there (holder_state). lock() returns
// false, and the caller fails or retries its operation, once `budgetNs` passed (at once
// past kLockWaitNs when the holder is stopped). Every wait is bounded by `budgetNs` plus
// one nap. A takeover is a compare-and-swap against the very word judged dead, so it never
// frees a lock the next holder took meanwhile.
struct SpinLock {
  std::atomic<uint64_t> holder;
  bool lock(uint64_t self, int64_t budgetNs = kLockWaitNs) {
    int64_t start = 0;
    int64_t nap = kLockNapMinNs;
    for (uint32_t spins = 0;; spins++) {
      uint64_t expected = 0;
      if (holder.compare_exchange_weak(expected, self, std::memory_order_acquire)) return true;
      if (spins < 256 || expected == 0) continue;
      int64_t now = mono_ns();
      if (start == 0) start = now;
      int64_t waited = now - start;
      if (waited <= std::min(budgetNs, kLockWaitNs)) {
        // Within the budget only the cheap check: a holder whose pid is gone (every holder
        // shares this waiter's pid namespace: proc_view) died; its lock is taken over at once.
        if (spins % 64 == 0 && kill(static_cast<pid_t>(holder_pid(expected)), 0) != 0 && errno == ESRCH) {
          holder.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
          continue;
        }
        if (spins < 1024) {
          sched_yield();
          continue;
        }
      } else {
        Holder h = holder_state(expected);
        if (h == Holder::DEAD) {
          holder.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
          continue;
        }
        if (h == Holder::STOPPED || waited > budgetNs) return false;
      }
      nap_ns(nap);
      nap = std::min(nap * 2, kLockNapMaxNs);
    }
  }
  void unlock() { holder.store(0, std::memory_order_release); }
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "a lock word is shared between processes");

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t pid;
  // Held by the owning thread for the device's whole life: when that thread or its
  // process dies, the kernel marks it EOWNERDEAD, which peers see with a trylock.
  pthread_mutex_t alive;
  std::atomic<uint32_t> dead;
  uint32_t mrSlots;
  uint32_t qpSlots;
  uint32_t pad0;
  uint64_t mrTableOff;
  uint64_t qpTableOff;
  uint64_t heapOff;
  uint64_t segmentBytes;
  char bootId[40];
  uint64_t procView;  // the owner's proc_view(): attachers must see /proc as it does
  uint64_t nonce;  // random, < 2^48: tells this segment from a later one at the same fd
  // Set (before the doorbell) by whoever leaves the owner something rarer than a completion
  // (a QP failed by a peer, a CQ overrun, an SRQ limit): the owner's doorbell scans its
  // QPs, CQs and SRQs only when it is set, so a completion's wake-up costs no scan.
  std::atomic<uint32_t> attention;
};

inline void flag_attention(uint8_t* base) {
  reinterpret_cast<SegmentHeader*>(base)->attention.store(1, std::memory_order_release);
}

struct MrEntry {
  std::atomic<uint32_t> key;  // 0 = free; else the current lkey/rkey of this slot
  uint32_t access;
  uint64_t addr;
  uint64_t length;
  // The owner's memfd backing the region (allocMr), or -1 (regMr of a JS buffer).
  // Peers map memfd-backed regions once and copy with memcpy; others by process_vm.
  int32_t memfd;
  // Initiators copying into or out of the region right now (see MrPins): deregistration
  // waits for them, so the owner never unmaps or frees memory under a peer's copy.
  std::atomic<uint32_t> pins;
  uint64_t regionId;  // unique per registration: peers' cached mappings check it
};

struct WireSge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

struct RecvWqe {
  uint64_t wrId;
  uint32_t numSge;
  uint32_t pad;
  // followed by maxSge WireSge
};

struct RecvQueue {
  SpinLock lock;
  uint32_t capacity;
  uint32_t maxSge;
  uint32_t head;                // next WQE a sender consumes
  uint32_t count;               // posted and not yet consumed
  std::atomic<uint32_t> limit;  // SRQ limit (0 = disarmed)
  std::atomic<uint32_t> limitReached;
  uint64_t wqeOff;
  uint32_t wqeBytes;
  uint32_t pad;
};

struct Cqe {
  uint64_t wrId;
  uint32_t byteLen;
  uint32_t imm;
  uint32_t qpNum;
  uint32_t srcQp;
  uint8_t status;
  uint8_t opcode;
  uint8_t flags;
  uint8_t solicited;  // the receive of a solicited SEND/WRITE_WITH_IMM: wakes a solicited-only arm
  uint32_t sqSeq;   // send_token() of the send WR it retires (1 … 2^32 − 1; 0 for receives)
  uint32_t qpSlot;  // owner's QP slot, to retire send-queue entries on poll
  uint32_t qpGen;
};

// CqShared::armed: which completion rings the owner's doorbell (ibv_req_notify_cq): none,
// the next one, or the next solicited one or any that failed (solicited_only).
constexpr uint32_t ARM_NONE = 0, ARM_NEXT = 1, ARM_SOLICITED = 2;

struct CqShared {
  SpinLock lock;
  uint32_t capacity;
  uint32_t head;
  uint32_t count;
  std::atomic<uint32_t> armed;  // 0, ARM_NEXT or ARM_SOLICITED: which push rings the doorbell
  std::atomic<uint32_t> overrun;  // set by whoever found it full; reported as CQ_ERR
  uint32_t pad;
  uint64_t entriesOff;
};

// QpShared::state holds (incarnation << 8) | a QPS_* code. Every transition the owner makes
// starts a new incarnation; a peer failing the QP (remoteFail) changes only the code, by a
// compare-and-swap against the word it checked. So a failure decided against one
// connection never lands on the next one of the same QP (after a reset and reconnect).
inline uint32_t state_code(uint32_t word) { return word & 0xff; }
inline uint32_t next_state(uint32_t word, uint32_t code) { return (((word >> 8) + 1) << 8) | code; }

struct QpShared {
  std::atomic<uint32_t> gen;    // bumped when the slot is created or destroyed
  std::atomic<uint32_t> state;  // see state_code()
  uint32_t qpn;
  std::atomic<uint32_t> access;       // remote access this QP grants its peer
  std::atomic<uint32_t> remoteError;  // a peer moved this QP to ERR; owner must flush
  std::atomic<uint32_t> stalled;      // fault: receiver not ready
  std::atomic<uint32_t> linkBroken;   // fault: nothing reaches or leaves this QP
  uint32_t hasSrq;
  uint32_t minRnrTimer;  // this QP as responder: how long its senders wait after RNR
  uint32_t peerPid;      // who it is connected to (set at RTR): others are not heard
  uint32_t peerQpn;
  uint32_t pad;
  uint64_t rqOff;  // RecvQueue (own or the SRQ's)
  uint64_t recvCqOff;
  // Initiators inside an operation on this QP right now (as MrEntry::pins): the owner
  // waits for them before it resets the queues or frees them, and quarantines what a
  // peer still holds past the bound.
  std::atomic<uint32_t> pins;
  uint32_t pad1;
};

inline bool owner_alive(SegmentHeader* h) {
  if (h->dead.load(std::memory_order_acquire)) return false;
  int rc = pthread_mutex_trylock(&h->alive);
  if (rc == EBUSY) return true;
  // EOWNERDEAD (or 0: released at close): the owner is gone. Let go at once: a held
  // robust mutex sits on this thread's robust list, which must never point into a
  // segment that is unmapped later.
  if (rc == EOWNERDEAD) pthread_mutex_consistent(&h->alive);
  if (rc == 0 || rc == EOWNERDEAD) pthread_mutex_unlock(&h->alive);
  h->dead.store(1, std::memory_order_release);
  return false;
}

// owner_alive() for a per-WR loop (readRun): one load of the alive mutex's futex word. glibc
// keeps the holder's TID there; when the holder dies the kernel clears the TID and sets
// FUTEX_OWNER_DIED, and at close the owner unlocks (0). Only "a TID, not died" is answered
// from the word; anything else asks owner_alive(), so the answer is the same, cheaper.
inline bool owner_alive_hot(SegmentHeader* h) {
#if defined(__GLIBC__)
  auto* word = reinterpret_cast<int*>(&h->alive.__data.__lock);
  auto w = static_cast<uint32_t>(__atomic_load_n(word, __ATOMIC_ACQUIRE));
  if ((w & FUTEX_TID_MASK) != 0 && (w & FUTEX_OWNER_DIED) == 0 && !h->dead.load(std::memory_order_acquire))
    return true;
#endif
  return owner_alive(h);
}

}  // namespace soft

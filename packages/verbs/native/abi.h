// The one contract between the addon and its TypeScript side (src/internal/abi.ts
// mirrors it). Every number both sides must agree on is defined here once; the addon
// exports this table (`abi()`), and the loader compares it field by field at load, so a
// mismatch is ERR_RDMA_NATIVE_LOAD naming the field instead of silent misbehaviour.
#pragma once

#include <cstdint>
#include <string_view>

namespace rdmajs::abi {

// Bumped whenever anything below changes meaning.
// 17: POLL_NOT_ARMED, SEND_WR_*/RECV_WR_*/SGE_* field offsets; 16: the link carries
// IBV_SEND_SOLICITED (LINK_SOLICITED, LINK_FLAG_SOLICITED, RESPOND_SOLICITED); 15: respondFrame
// takes the read's wake-ups (FRAME_IN_WAKE, FRAME_READY); 14: postSend's 4th argument, the word
// its first WR begins at (SendWrList); 13: respondFrame (FRAME_* words, LINK_RES_HEADER,
// LINK_ANSWER_BIT), linkDone's packed answer (LINK_DONE_*_SHIFT); 12: its inputs in LINK_IN_*
// words; 11: linkTake writes the request header and sends (LINK_SENT, LINK_REQ_*); 10:
// linkSend's `settles`; 9: the link's WC_REM_INV_REQ_ERR, WC_STATUS_LAST, LINK_NO_RNR,
// LINK_TAKE_LAST; 8: FLAG_SOLICITED.
constexpr int kVersion = 17;

// Event kinds delivered to the JS callback as (kind, handle). EV_CQS_READY (soft): `handle`
// CQs became ready; their handles are in the device's Uint32Array of CQ_READY_BATCH
// entries (one crossing per wake-up, however many CQs it has). EV_QP_LAST_WQE: a QP on an SRQ
// went to ERR and no WQE it took is still in use (IBV_EVENT_QP_LAST_WQE_REACHED).
constexpr int EV_DOORBELL = 0, EV_QP_FATAL = 1, EV_CQ_ERR = 2, EV_SRQ_LIMIT = 3, EV_LINK = 4, EV_PORT = 5,
              EV_CQS_READY = 6, EV_QP_LAST_WQE = 7;
constexpr int CQ_READY_BATCH = 1024;

// Why a post stopped short. POST_BUSY: a queue lock is held by a process that does not let
// go (stopped, traced); nothing was posted, try again later.
constexpr int POST_OK = 0, POST_EINVAL = 1, POST_ENOMEM = 2, POST_OTHER = 3, POST_BAD_INLINE = 4, POST_BUSY = 5;

// The post record (Uint32Array of POST_RECORD_WORDS) a device is handed once, at
// construction: postSend, postRecv and postSrqRecv write into it how many WRs of the batch
// were posted (those before the first refused one) and the POST_* code, and return that
// code. A fixed record, not an object per post: posting allocates nothing.
constexpr int POST_RECORD_WORDS = 2;
constexpr int POST_REC_POSTED = 0, POST_REC_CODE = 1;

// The C++ side of a post record.
struct PostResult {
  uint32_t posted;
  int code;
};

// pollCq with armIfEmpty: took none and did NOT leave the CQ armed (the arm found completions
// and was dropped, but the CQ lock could not be taken; or the provider does not arm in a poll).
// 0 with armIfEmpty means: none taken, and the CQ is armed for the next completion.
constexpr int POLL_NOT_ARMED = -1;

// QP states: ibv_qp_state values.
constexpr int QPS_RESET = 0, QPS_INIT = 1, QPS_RTR = 2, QPS_RTS = 3, QPS_ERR = 6;

// Send opcodes as JS packs them (not ibv_wr_opcode: each provider maps them).
constexpr int OP_SEND = 0, OP_SEND_WITH_IMM = 1, OP_RDMA_WRITE = 2, OP_RDMA_WRITE_WITH_IMM = 3, OP_RDMA_READ = 4,
              OP_ATOMIC_CMP_AND_SWP = 5, OP_ATOMIC_FETCH_AND_ADD = 6;
constexpr int OP_LAST = OP_ATOMIC_FETCH_AND_ADD;

// Send WR flags. FLAG_SOLICITED: IBV_SEND_SOLICITED, carried to the receiver, whose CQ armed
// solicited-only is woken by it.
constexpr int FLAG_SIGNALED = 1, FLAG_INLINE = 2, FLAG_SOLICITED = 4;

// Packed work requests (Float64Array): send = wrId, opcode, flags, imm, remoteAddr, rkey,
// numSge, then addr/length/lkey per SGE; recv = wrId, numSge, then the SGEs. An atomic WR
// (one 8-byte SGE) is followed by its operands compare_add and swap, each a raw uint64
// written through a BigUint64Array view of the same buffer (a double cannot hold 64 bits).
// postSend(qp, wrs, count, start) reads its `count` WRs from word `start` on (a SendWrList
// posts any run of its pre-encoded records without copying them).
// The fields' word offsets: SEND_WR_* in a send header, RECV_WR_* in a receive header, SGE_*
// in an SGE (each provider's decoder and the JS encoder read these names, never numbers).
constexpr int SEND_WR_HEADER_WORDS = 7, RECV_WR_HEADER_WORDS = 2, SGE_WORDS = 3, ATOMIC_OPERAND_WORDS = 2;
constexpr int SEND_WR_ID = 0, SEND_WR_OPCODE = 1, SEND_WR_FLAGS = 2, SEND_WR_IMM = 3, SEND_WR_REMOTE_ADDR = 4,
              SEND_WR_RKEY = 5, SEND_WR_NUM_SGE = 6;
constexpr int RECV_WR_ID = 0, RECV_WR_NUM_SGE = 1;
constexpr int SGE_ADDR = 0, SGE_LENGTH = 1, SGE_LKEY = 2;
constexpr int ATOMIC_BYTES = 8;  // the operand size of both atomics, and their SGE's length

// A completion record (Float64Array, 8 words): wrId, status, opcode, byteLen, imm, qpNum,
// flags + 256 * vendorErr, srcQp. Status and opcode are the ibverbs values.
constexpr int WC_WORDS = 8;
constexpr int WC_WR_ID = 0, WC_STATUS = 1, WC_OPCODE = 2, WC_BYTE_LEN = 3, WC_IMM = 4, WC_QP_NUM = 5, WC_FLAGS = 6,
              WC_SRC_QP = 7;
constexpr int WC_FLAG_WITH_IMM = 2;  // IBV_WC_WITH_IMM
constexpr int WCO_SEND = 0, WCO_RDMA_WRITE = 1, WCO_RDMA_READ = 2, WCO_COMP_SWAP = 3, WCO_FETCH_ADD = 4, WCO_RECV = 128,
              WCO_RECV_RDMA_WITH_IMM = 129;

// Soft TCP link: the header linkTake fills (Float64Array, LINK_WORDS words). LINK_SENT: the
// bytes linkTake itself sent to the socket it was given (-1: it sent nothing, see linkTake).
// LINK_IN_*: linkTake's optional inputs (request id, socket descriptor + 1, the target's
// frame limit, settles 1/0), set by the caller and zeroed by every call — words, not arguments: a seventh
// argument makes node-addon-api allocate the argument array on every call. LINK_SOLICITED: 1 when
// the WR carries IBV_SEND_SOLICITED to the receiver (a SEND or WRITE_WITH_IMM posted `solicited`).
constexpr int LINK_WORDS = 17;
constexpr int LINK_OPCODE = 0, LINK_IMM = 1, LINK_REMOTE_ADDR = 2, LINK_RKEY = 3, LINK_LENGTH = 4, LINK_DST_SLOT = 5,
              LINK_DST_GEN = 6, LINK_SRC_QPN = 7, LINK_SRC_PID = 8, LINK_TOKEN = 9,
              LINK_HEAD = 10, LINK_SENT = 11, LINK_IN_REQ_ID = 12, LINK_IN_SEND_FD = 13, LINK_IN_SEND_MAX = 14,
              LINK_IN_SETTLES = 15, LINK_SOLICITED = 16;
// A link request frame's header (frames.ts has the layout), written by JS or by linkTake:
// its size, and the flags byte's bits (HEAD: the initiator's oldest unfinished WR;
// ANSWER_BACK: answer on the target QP's own connection back, when it has one; SOLICITED: the
// WR's IBV_SEND_SOLICITED, only on the opcodes that complete a receive: SEND, SEND_WITH_IMM,
// RDMA_WRITE_WITH_IMM).
constexpr int LINK_REQ_HEADER = 52, LINK_FLAG_HEAD = 1, LINK_FLAG_ANSWER_BACK = 2, LINK_FLAG_SOLICITED = 4;
// A response frame's header size, and the bit set in its length word (an answer, not a request).
constexpr int LINK_RES_HEADER = 12;
constexpr uint32_t LINK_ANSWER_BIT = 0x80000000u;

// What linkTake returns. LINK_TAKE_NEEDS_BUFFER: the next WR's payload, hdr[LINK_LENGTH]
// bytes, does not fit the buffer given (nothing was taken: call again with one that large;
// hdr[LINK_HEAD] says whether it would be the head).
// LINK_TAKE_LAST: taken, as READY, and nothing more can be taken now (no call to learn it).
constexpr int LINK_TAKE_NONE = 0, LINK_TAKE_READY = 1, LINK_TAKE_NEEDS_BUFFER = 2, LINK_TAKE_LAST = 3;

// Soft TCP link: outcomes of an operation run by the target (respond, linkDone).
constexpr int LINK_DONE = 0, LINK_RNR = 1, LINK_TRANSPORT = 2, LINK_DISCARDED = 3;
// linkDone's answer word: outcome (bits 0-7), status (from LINK_DONE_STATUS_SHIFT, 8 bits), RNR
// timer (from LINK_DONE_RNR_SHIFT, 16 bits as the wire has it; more than 31 counts as 31).
constexpr int LINK_DONE_STATUS_SHIFT = 8, LINK_DONE_RNR_SHIFT = 16;
// The RNR timer an outcome other than RNR carries (ignored for it: an answer names one).
constexpr int LINK_NO_RNR = 12;
// ibv_wc_status values the link names: a request the target refuses (too long, unknown), and
// the highest status there is (an answer naming a higher one is malformed).
constexpr int WC_REM_INV_REQ_ERR = 9, WC_STATUS_LAST = 21;  // IBV_WC_GENERAL_ERR

// The respond record (Float64Array, RESPOND_WORDS words): the target's link writes a
// request's fields (RESPOND_SLOT .. RESPOND_SRC_PID) and respond() writes its answer
// (RESPOND_OUTCOME, a LINK_* outcome, also returned; RESPOND_STATUS, an ibv_wc_status;
// RESPOND_RNR_TIMER, the target QP's min_rnr_timer for an RNR). RESPOND_PLACED: 0, or the
// length of an RDMA WRITE whose payload place() already put into the target memory piece by
// piece as it arrived (respond then checks it all again and copies nothing; place() reads
// the same record). RESPOND_SOLICITED: 1 when the request carried LINK_FLAG_SOLICITED (the
// receive completion it makes wakes a solicited-only arm). One record per listener, reused:
// answering allocates nothing.
constexpr int RESPOND_WORDS = 13;
constexpr int RESPOND_SLOT = 0, RESPOND_GEN = 1, RESPOND_OPCODE = 2, RESPOND_IMM = 3, RESPOND_REMOTE_ADDR = 4,
              RESPOND_RKEY = 5, RESPOND_SRC_QPN = 6, RESPOND_SRC_PID = 7, RESPOND_OUTCOME = 8, RESPOND_STATUS = 9,
              RESPOND_RNR_TIMER = 10, RESPOND_PLACED = 11, RESPOND_SOLICITED = 12;

// respondFrame's record (Float64Array, FRAME_WORDS words, one per listener): the common request
// run in one crossing. Inputs (FRAME_IN_*): where the frame lies in its buffer (offset, length),
// where its answer's header goes in the out buffer, and what the frame must name to run here —
// the bound QP (slot, gen), the source QP of the pair whose state JS holds (pid, qpn) and that
// pair's expected token. Anything else (another source, another token, a READ or an atomic, a
// malformed header) is not run (FRAME_NOT_RUN): the JS path handles it, with every check.
// Outputs, when run: the answer (FRAME_OUTCOME, also returned; FRAME_STATUS; FRAME_RNR_TIMER) and
// the request's fields JS remembers for a resend (FRAME_OPCODE .. FRAME_LENGTH).
// FRAME_IN_WAKE = 1: the frame ends its read, so the wake-ups that read owes this device's CQs
// are taken in the same crossing (wakeOwed's work): FRAME_READY = how many ready CQs it put in
// the device's ready array (0: none owed), or -1 when they are left for wakeOwed() (not asked,
// not run, async events to deliver, more than one batch). The word is consumed (zeroed).
constexpr int FRAME_WORDS = 17;
constexpr int FRAME_IN_OFFSET = 0, FRAME_IN_LENGTH = 1, FRAME_IN_OUT_AT = 2, FRAME_IN_SLOT = 3, FRAME_IN_GEN = 4,
              FRAME_IN_SRC_PID = 5, FRAME_IN_SRC_QPN = 6, FRAME_IN_TOKEN = 7, FRAME_OUTCOME = 8, FRAME_STATUS = 9,
              FRAME_RNR_TIMER = 10, FRAME_OPCODE = 11, FRAME_REMOTE_ADDR = 12, FRAME_RKEY = 13, FRAME_LENGTH = 14,
              FRAME_IN_WAKE = 15, FRAME_READY = 16;
constexpr int FRAME_NOT_RUN = -1;

// Soft fault kinds (inject). The last four are for tests that model hostile or stuck peers
// (@rdmajs/verbs/testing exposes the first three).
constexpr int FAULT_BREAK_LINK = 0, FAULT_STALL_RECEIVER = 1, FAULT_DELAY = 2, FAULT_HOLD_PEER_LOCK = 3,
              FAULT_PIN_PEER = 4, FAULT_UNPIN_PEER = 5, FAULT_PAUSE_IN_DELIVER = 6;

// One row of the exported table.
struct Entry {
  const char* name;
  double value;
};

constexpr Entry kTable[] = {
    {"version", kVersion},
    {"EV_DOORBELL", EV_DOORBELL},
    {"EV_QP_FATAL", EV_QP_FATAL},
    {"EV_CQ_ERR", EV_CQ_ERR},
    {"EV_SRQ_LIMIT", EV_SRQ_LIMIT},
    {"EV_LINK", EV_LINK},
    {"EV_PORT", EV_PORT},
    {"EV_CQS_READY", EV_CQS_READY},
    {"EV_QP_LAST_WQE", EV_QP_LAST_WQE},
    {"CQ_READY_BATCH", CQ_READY_BATCH},
    {"POST_OK", POST_OK},
    {"POST_EINVAL", POST_EINVAL},
    {"POST_ENOMEM", POST_ENOMEM},
    {"POST_OTHER", POST_OTHER},
    {"POST_BAD_INLINE", POST_BAD_INLINE},
    {"POST_BUSY", POST_BUSY},
    {"POST_RECORD_WORDS", POST_RECORD_WORDS},
    {"POST_REC_POSTED", POST_REC_POSTED},
    {"POST_REC_CODE", POST_REC_CODE},
    {"POLL_NOT_ARMED", POLL_NOT_ARMED},
    {"QPS_RESET", QPS_RESET},
    {"QPS_INIT", QPS_INIT},
    {"QPS_RTR", QPS_RTR},
    {"QPS_RTS", QPS_RTS},
    {"QPS_ERR", QPS_ERR},
    {"OP_SEND", OP_SEND},
    {"OP_SEND_WITH_IMM", OP_SEND_WITH_IMM},
    {"OP_RDMA_WRITE", OP_RDMA_WRITE},
    {"OP_RDMA_WRITE_WITH_IMM", OP_RDMA_WRITE_WITH_IMM},
    {"OP_RDMA_READ", OP_RDMA_READ},
    {"OP_ATOMIC_CMP_AND_SWP", OP_ATOMIC_CMP_AND_SWP},
    {"OP_ATOMIC_FETCH_AND_ADD", OP_ATOMIC_FETCH_AND_ADD},
    {"OP_LAST", OP_LAST},
    {"FLAG_SIGNALED", FLAG_SIGNALED},
    {"FLAG_INLINE", FLAG_INLINE},
    {"FLAG_SOLICITED", FLAG_SOLICITED},
    {"SEND_WR_HEADER_WORDS", SEND_WR_HEADER_WORDS},
    {"RECV_WR_HEADER_WORDS", RECV_WR_HEADER_WORDS},
    {"SGE_WORDS", SGE_WORDS},
    {"ATOMIC_OPERAND_WORDS", ATOMIC_OPERAND_WORDS},
    {"SEND_WR_ID", SEND_WR_ID},
    {"SEND_WR_OPCODE", SEND_WR_OPCODE},
    {"SEND_WR_FLAGS", SEND_WR_FLAGS},
    {"SEND_WR_IMM", SEND_WR_IMM},
    {"SEND_WR_REMOTE_ADDR", SEND_WR_REMOTE_ADDR},
    {"SEND_WR_RKEY", SEND_WR_RKEY},
    {"SEND_WR_NUM_SGE", SEND_WR_NUM_SGE},
    {"RECV_WR_ID", RECV_WR_ID},
    {"RECV_WR_NUM_SGE", RECV_WR_NUM_SGE},
    {"SGE_ADDR", SGE_ADDR},
    {"SGE_LENGTH", SGE_LENGTH},
    {"SGE_LKEY", SGE_LKEY},
    {"ATOMIC_BYTES", ATOMIC_BYTES},
    {"WC_WORDS", WC_WORDS},
    {"WC_WR_ID", WC_WR_ID},
    {"WC_STATUS", WC_STATUS},
    {"WC_OPCODE", WC_OPCODE},
    {"WC_BYTE_LEN", WC_BYTE_LEN},
    {"WC_IMM", WC_IMM},
    {"WC_QP_NUM", WC_QP_NUM},
    {"WC_FLAGS", WC_FLAGS},
    {"WC_SRC_QP", WC_SRC_QP},
    {"WC_FLAG_WITH_IMM", WC_FLAG_WITH_IMM},
    {"WCO_SEND", WCO_SEND},
    {"WCO_RDMA_WRITE", WCO_RDMA_WRITE},
    {"WCO_RDMA_READ", WCO_RDMA_READ},
    {"WCO_COMP_SWAP", WCO_COMP_SWAP},
    {"WCO_FETCH_ADD", WCO_FETCH_ADD},
    {"WCO_RECV", WCO_RECV},
    {"WCO_RECV_RDMA_WITH_IMM", WCO_RECV_RDMA_WITH_IMM},
    {"LINK_WORDS", LINK_WORDS},
    {"LINK_OPCODE", LINK_OPCODE},
    {"LINK_IMM", LINK_IMM},
    {"LINK_REMOTE_ADDR", LINK_REMOTE_ADDR},
    {"LINK_RKEY", LINK_RKEY},
    {"LINK_LENGTH", LINK_LENGTH},
    {"LINK_DST_SLOT", LINK_DST_SLOT},
    {"LINK_DST_GEN", LINK_DST_GEN},
    {"LINK_SRC_QPN", LINK_SRC_QPN},
    {"LINK_SRC_PID", LINK_SRC_PID},
    {"LINK_TOKEN", LINK_TOKEN},
    {"LINK_HEAD", LINK_HEAD},
    {"LINK_SENT", LINK_SENT},
    {"LINK_IN_REQ_ID", LINK_IN_REQ_ID},
    {"LINK_IN_SEND_FD", LINK_IN_SEND_FD},
    {"LINK_IN_SEND_MAX", LINK_IN_SEND_MAX},
    {"LINK_IN_SETTLES", LINK_IN_SETTLES},
    {"LINK_SOLICITED", LINK_SOLICITED},
    {"LINK_REQ_HEADER", LINK_REQ_HEADER},
    {"LINK_FLAG_HEAD", LINK_FLAG_HEAD},
    {"LINK_FLAG_ANSWER_BACK", LINK_FLAG_ANSWER_BACK},
    {"LINK_FLAG_SOLICITED", LINK_FLAG_SOLICITED},
    {"LINK_RES_HEADER", LINK_RES_HEADER},
    {"LINK_ANSWER_BIT", LINK_ANSWER_BIT},
    {"LINK_TAKE_NONE", LINK_TAKE_NONE},
    {"LINK_TAKE_READY", LINK_TAKE_READY},
    {"LINK_TAKE_NEEDS_BUFFER", LINK_TAKE_NEEDS_BUFFER},
    {"LINK_TAKE_LAST", LINK_TAKE_LAST},
    {"LINK_DONE", LINK_DONE},
    {"LINK_RNR", LINK_RNR},
    {"LINK_TRANSPORT", LINK_TRANSPORT},
    {"LINK_DISCARDED", LINK_DISCARDED},
    {"LINK_NO_RNR", LINK_NO_RNR},
    {"LINK_DONE_STATUS_SHIFT", LINK_DONE_STATUS_SHIFT},
    {"LINK_DONE_RNR_SHIFT", LINK_DONE_RNR_SHIFT},
    {"WC_REM_INV_REQ_ERR", WC_REM_INV_REQ_ERR},
    {"WC_STATUS_LAST", WC_STATUS_LAST},
    {"RESPOND_WORDS", RESPOND_WORDS},
    {"RESPOND_SLOT", RESPOND_SLOT},
    {"RESPOND_GEN", RESPOND_GEN},
    {"RESPOND_OPCODE", RESPOND_OPCODE},
    {"RESPOND_IMM", RESPOND_IMM},
    {"RESPOND_REMOTE_ADDR", RESPOND_REMOTE_ADDR},
    {"RESPOND_RKEY", RESPOND_RKEY},
    {"RESPOND_SRC_QPN", RESPOND_SRC_QPN},
    {"RESPOND_SRC_PID", RESPOND_SRC_PID},
    {"RESPOND_OUTCOME", RESPOND_OUTCOME},
    {"RESPOND_STATUS", RESPOND_STATUS},
    {"RESPOND_RNR_TIMER", RESPOND_RNR_TIMER},
    {"RESPOND_PLACED", RESPOND_PLACED},
    {"RESPOND_SOLICITED", RESPOND_SOLICITED},
    {"FRAME_WORDS", FRAME_WORDS},
    {"FRAME_IN_OFFSET", FRAME_IN_OFFSET},
    {"FRAME_IN_LENGTH", FRAME_IN_LENGTH},
    {"FRAME_IN_OUT_AT", FRAME_IN_OUT_AT},
    {"FRAME_IN_SLOT", FRAME_IN_SLOT},
    {"FRAME_IN_GEN", FRAME_IN_GEN},
    {"FRAME_IN_SRC_PID", FRAME_IN_SRC_PID},
    {"FRAME_IN_SRC_QPN", FRAME_IN_SRC_QPN},
    {"FRAME_IN_TOKEN", FRAME_IN_TOKEN},
    {"FRAME_OUTCOME", FRAME_OUTCOME},
    {"FRAME_STATUS", FRAME_STATUS},
    {"FRAME_RNR_TIMER", FRAME_RNR_TIMER},
    {"FRAME_OPCODE", FRAME_OPCODE},
    {"FRAME_REMOTE_ADDR", FRAME_REMOTE_ADDR},
    {"FRAME_RKEY", FRAME_RKEY},
    {"FRAME_LENGTH", FRAME_LENGTH},
    {"FRAME_IN_WAKE", FRAME_IN_WAKE},
    {"FRAME_READY", FRAME_READY},
    {"FRAME_NOT_RUN", FRAME_NOT_RUN},
    {"FAULT_BREAK_LINK", FAULT_BREAK_LINK},
    {"FAULT_STALL_RECEIVER", FAULT_STALL_RECEIVER},
    {"FAULT_DELAY", FAULT_DELAY},
    {"FAULT_HOLD_PEER_LOCK", FAULT_HOLD_PEER_LOCK},
    {"FAULT_PIN_PEER", FAULT_PIN_PEER},
    {"FAULT_UNPIN_PEER", FAULT_UNPIN_PEER},
    {"FAULT_PAUSE_IN_DELIVER", FAULT_PAUSE_IN_DELIVER},
};

// ---- what must hold for the numbers above to make sense (checked at compile time)

namespace check {

// Every field index below `words`, no two alike: a record's fields never overlap.
template <size_t N>
constexpr bool fields(const int (&f)[N], int words) {
  for (size_t i = 0; i < N; i++) {
    if (f[i] < 0 || f[i] >= words) return false;
    for (size_t j = 0; j < i; j++)
      if (f[i] == f[j]) return false;
  }
  return true;
}

// Codes of one kind are distinct (and non-negative): a value names one meaning.
template <size_t N>
constexpr bool distinct(const int (&c)[N]) {
  return fields(c, 1 << 30);
}

// Consecutive from 0: JS and each provider index tables by them.
template <size_t N>
constexpr bool dense(const int (&c)[N]) {
  for (size_t i = 0; i < N; i++)
    if (c[i] != static_cast<int>(i)) return false;
  return true;
}

constexpr bool unique_names() {
  constexpr size_t n = sizeof kTable / sizeof kTable[0];
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++)
      if (std::string_view(kTable[i].name) == kTable[j].name) return false;
  return true;
}

}  // namespace check

static_assert(check::unique_names(), "each ABI field is exported once");
static_assert(check::distinct({EV_DOORBELL, EV_QP_FATAL, EV_CQ_ERR, EV_SRQ_LIMIT, EV_LINK, EV_PORT, EV_CQS_READY,
                                EV_QP_LAST_WQE}),
              "event kinds are distinct");
static_assert(CQ_READY_BATCH > 0, "a wake-up hands over at least one CQ");
static_assert(POST_OK == 0 &&
                  check::distinct({POST_OK, POST_EINVAL, POST_ENOMEM, POST_OTHER, POST_BAD_INLINE, POST_BUSY}),
              "post codes are distinct and 0 is success");
static_assert(check::fields({POST_REC_POSTED, POST_REC_CODE}, POST_RECORD_WORDS), "post record fields");
static_assert(POLL_NOT_ARMED < 0, "pollCq's 'not armed' is no count");
static_assert(check::distinct({QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS, QPS_ERR}), "QP states are distinct");
static_assert(check::dense({OP_SEND, OP_SEND_WITH_IMM, OP_RDMA_WRITE, OP_RDMA_WRITE_WITH_IMM, OP_RDMA_READ,
                            OP_ATOMIC_CMP_AND_SWP, OP_ATOMIC_FETCH_AND_ADD}) &&
                  OP_LAST == OP_ATOMIC_FETCH_AND_ADD,
              "send opcodes are 0..OP_LAST");
static_assert((FLAG_SIGNALED & FLAG_INLINE) == 0 && ((FLAG_SIGNALED | FLAG_INLINE) & FLAG_SOLICITED) == 0,
              "WR flags are separate bits");
static_assert(SEND_WR_HEADER_WORDS == 7 && RECV_WR_HEADER_WORDS == 2 && SGE_WORDS == 3,
              "the packed WR layout described above");
static_assert(check::fields({SEND_WR_ID, SEND_WR_OPCODE, SEND_WR_FLAGS, SEND_WR_IMM, SEND_WR_REMOTE_ADDR, SEND_WR_RKEY,
                             SEND_WR_NUM_SGE},
                            SEND_WR_HEADER_WORDS) &&
                  SEND_WR_NUM_SGE == SEND_WR_HEADER_WORDS - 1,
              "send header fields, the SGE count last (its SGEs follow it)");
static_assert(check::fields({RECV_WR_ID, RECV_WR_NUM_SGE}, RECV_WR_HEADER_WORDS) &&
                  RECV_WR_NUM_SGE == RECV_WR_HEADER_WORDS - 1,
              "receive header fields, the SGE count last");
static_assert(check::fields({SGE_ADDR, SGE_LENGTH, SGE_LKEY}, SGE_WORDS), "SGE fields");
static_assert(ATOMIC_BYTES == sizeof(uint64_t) && ATOMIC_OPERAND_WORDS * sizeof(double) == 2 * sizeof(uint64_t),
              "two raw uint64 operands fill ATOMIC_OPERAND_WORDS doubles");
static_assert(check::fields({WC_WR_ID, WC_STATUS, WC_OPCODE, WC_BYTE_LEN, WC_IMM, WC_QP_NUM, WC_FLAGS, WC_SRC_QP},
                            WC_WORDS),
              "completion record fields");
static_assert(check::distinct({WCO_SEND, WCO_RDMA_WRITE, WCO_RDMA_READ, WCO_COMP_SWAP, WCO_FETCH_ADD, WCO_RECV,
                               WCO_RECV_RDMA_WITH_IMM}),
              "completion opcodes are distinct");
static_assert(check::fields({LINK_OPCODE, LINK_IMM, LINK_REMOTE_ADDR, LINK_RKEY, LINK_LENGTH, LINK_DST_SLOT,
                             LINK_DST_GEN, LINK_SRC_QPN, LINK_SRC_PID, LINK_TOKEN, LINK_HEAD, LINK_SENT,
                             LINK_IN_REQ_ID, LINK_IN_SEND_FD, LINK_IN_SEND_MAX, LINK_IN_SETTLES, LINK_SOLICITED},
                            LINK_WORDS),
              "link header fields");
static_assert((LINK_FLAG_HEAD & LINK_FLAG_ANSWER_BACK) == 0 &&
                  ((LINK_FLAG_HEAD | LINK_FLAG_ANSWER_BACK) & LINK_FLAG_SOLICITED) == 0 && LINK_FLAG_SOLICITED < 256,
              "a request's flags are separate bits of one byte");
static_assert(check::distinct({LINK_TAKE_NONE, LINK_TAKE_READY, LINK_TAKE_NEEDS_BUFFER, LINK_TAKE_LAST}),
              "linkTake codes are distinct");
static_assert(check::distinct({LINK_DONE, LINK_RNR, LINK_TRANSPORT, LINK_DISCARDED}), "link outcomes are distinct");
static_assert(LINK_NO_RNR >= 0 && LINK_NO_RNR <= 31, "an RNR timer is a 5-bit code");
static_assert(LINK_DONE_STATUS_SHIFT == 8 && LINK_DONE_RNR_SHIFT == 16,
              "linkDone's word: outcome and status bytes, then the wire's 16-bit RNR timer (one uint32)");
static_assert(WC_REM_INV_REQ_ERR <= WC_STATUS_LAST, "statuses the link names exist");
static_assert(check::fields({RESPOND_SLOT, RESPOND_GEN, RESPOND_OPCODE, RESPOND_IMM, RESPOND_REMOTE_ADDR, RESPOND_RKEY,
                             RESPOND_SRC_QPN, RESPOND_SRC_PID, RESPOND_OUTCOME, RESPOND_STATUS, RESPOND_RNR_TIMER,
                             RESPOND_PLACED, RESPOND_SOLICITED},
                            RESPOND_WORDS),
              "respond record fields");
static_assert(check::fields({FRAME_IN_OFFSET, FRAME_IN_LENGTH, FRAME_IN_OUT_AT, FRAME_IN_SLOT, FRAME_IN_GEN,
                             FRAME_IN_SRC_PID, FRAME_IN_SRC_QPN, FRAME_IN_TOKEN, FRAME_OUTCOME, FRAME_STATUS,
                             FRAME_RNR_TIMER, FRAME_OPCODE, FRAME_REMOTE_ADDR, FRAME_RKEY, FRAME_LENGTH, FRAME_IN_WAKE,
                             FRAME_READY},
                            FRAME_WORDS),
              "respondFrame record fields");
static_assert(FRAME_NOT_RUN < 0, "respondFrame's 'not run' is no outcome (those are distinct and non-negative)");
static_assert(LINK_RES_HEADER == 12 && (LINK_ANSWER_BIT >> 31) == 1, "frames.ts's response header layout");
static_assert(check::dense({FAULT_BREAK_LINK, FAULT_STALL_RECEIVER, FAULT_DELAY, FAULT_HOLD_PEER_LOCK, FAULT_PIN_PEER,
                            FAULT_UNPIN_PEER, FAULT_PAUSE_IN_DELIVER}),
              "fault kinds are 0..6");

}  // namespace rdmajs::abi

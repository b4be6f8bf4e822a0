// The soft device's TCP link (the sockets live in JS; these move WRs and answers across)
// and its fault injection.
#include <sys/socket.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "records.h"
#include "soft_device.h"

namespace rdmajs {

Napi::Value SoftDevice::Inject(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  namespace abi = rdmajs::abi;
  uint32_t kind = U32(info, 1);
  double v = Num(info, 2);
  switch (kind) {
    case abi::FAULT_BREAK_LINK:
      dev_->injectBreakLink(h);
      break;
    case abi::FAULT_STALL_RECEIVER:
      dev_->injectStall(h, v != 0);
      break;
    case abi::FAULT_DELAY:
      dev_->injectDelay(h, std::isfinite(v) && v > 0 ? v : 0);
      break;
    case abi::FAULT_HOLD_PEER_LOCK:
      dev_->injectHoldPeerLock(h, std::isfinite(v) && v > 0 ? std::min(v, 10000.0) : 0);
      break;
    case abi::FAULT_PIN_PEER:
    case abi::FAULT_UNPIN_PEER:
      dev_->injectPeerPin(h, soft::to_u32(v), kind == abi::FAULT_PIN_PEER);
      break;
    case abi::FAULT_PAUSE_IN_DELIVER:
      dev_->injectPauseInDeliver(h, std::isfinite(v) && v > 0 ? std::min(v, 10000.0) : 0);
      break;
    default:
      Fail(info, EINVAL, "no such fault kind: " + std::to_string(kind), "ERR_RDMA_INVALID_ARG");
  }
  return info.Env().Undefined();
}

Napi::Value SoftDevice::ToRtrLink(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  Attr a(info, 1, "toRtrLink");
  uint32_t pid = a.U32("pid", 0x400000);
  uint32_t slot = a.U32("slot");
  uint32_t gen = a.U32("gen");
  uint32_t qpn = a.U32("qpn", 0xffffff);
  uint32_t minRnr = a.U32("minRnrTimer", 31);
  if (!a.ok()) return info.Env().Undefined();
  return Napi::Number::New(info.Env(), dev_->toRtrLink(h, pid, slot, gen, qpn, minRnr));
}

Napi::Value SoftDevice::LinkTake(const Napi::CallbackInfo& info) {
  int h;
  ArrayView hdr;
  ArrayView payload;
  if (!QpArg(info, 0, &h) || !ArrayArg(info, 1, napi_float64_array, &hdr) ||
      !ArrayArg(info, 2, napi_uint8_array, &payload))
    return info.Env().Undefined();
  if (hdr.length < static_cast<size_t>(rdmajs::abi::LINK_WORDS)) {
    Fail(info, EINVAL, "linkTake: the header record is shorter than LINK_WORDS", "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  // The inputs in hdr's LINK_IN_* words, consumed before anything can refuse the call: zeroed
  // here, so a call that sets none never acts on an earlier call's (a refused one's included).
  namespace abi = rdmajs::abi;
  double* words = hdr.f64();
  double reqIdWord = words[abi::LINK_IN_REQ_ID];
  double fd = words[abi::LINK_IN_SEND_FD] - 1;  // stored + 1: a zeroed word names no socket
  double sendMax = words[abi::LINK_IN_SEND_MAX];
  bool settles = words[abi::LINK_IN_SETTLES] == 1;
  words[abi::LINK_IN_REQ_ID] = words[abi::LINK_IN_SEND_FD] = words[abi::LINK_IN_SEND_MAX] =
      words[abi::LINK_IN_SETTLES] = 0;
  words[abi::LINK_SENT] = -1;
  // The payload goes at `offset`: the bytes before it are the frame's header (one buffer,
  // one write per frame).
  size_t offset = U32(info, 3);
  if (offset > payload.bytes) {
    Fail(info, EINVAL, "linkTake: offset past the payload buffer", "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  // cap (optional): at most this much payload here (the link gathers small requests beside
  // its answers; a larger one goes into a frame buffer of its own).
  size_t cap = payload.bytes - offset;
  if (info.Length() > 4 && info[4].IsNumber()) cap = std::min<size_t>(cap, U32(info, 4));
  // defer (optional): a WRITE/SEND's payload is left where it lies, for linkWrite.
  bool defer = info.Length() > 5 && info[5].IsBoolean() && info[5].As<Napi::Boolean>().Value();
  // reqId (> 0): the frame's request header is written at offset - LINK_REQ_HEADER, naming
  // it (no JS pass over the record for it).
  uint32_t reqId = std::isfinite(reqIdWord) && reqIdWord > 0 && reqIdWord <= UINT32_MAX
                       ? static_cast<uint32_t>(reqIdWord)
                       : 0;
  if (reqId != 0 && offset < static_cast<size_t>(abi::LINK_REQ_HEADER)) {
    Fail(info, EINVAL, "linkTake: no room for the request header before offset", "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  if (reqId != 0 && defer) {
    // A deferred payload is not here to go after the header: linkWrite writes both.
    Fail(info, EINVAL, "linkTake: a request header goes with a gathered payload, not a deferred one",
         "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  int r = dev_->linkTake(h, words, payload.u8() + offset, cap, defer);
  bool taken = r == abi::LINK_TAKE_READY || r == abi::LINK_TAKE_LAST;
  if (taken && reqId != 0) {
    size_t end = offset + WriteRequestHeader(payload.u8() + offset - abi::LINK_REQ_HEADER, reqId, words) -
                 abi::LINK_REQ_HEADER;
    // With a socket: the last WR there is to take now, whose length the target takes (at
    // most sendMax), goes out at once with everything gathered before it, payload[0, end) —
    // linkSend's work in this same crossing. The caller checked that nothing of the
    // connection is queued in node (the bytes keep their order) and that payload[0,
    // offset - LINK_REQ_HEADER) holds only gathered bytes not sent yet.
    if (r == abi::LINK_TAKE_LAST && std::isfinite(fd) && fd >= 0 && fd <= INT32_MAX &&
        words[abi::LINK_LENGTH] <= sendMax) {
      if (settles) linkFlushOwed_ = false;
      ssize_t n = send(static_cast<int>(fd), payload.u8(), end, MSG_NOSIGNAL | MSG_DONTWAIT);
      words[abi::LINK_SENT] = n > 0 ? static_cast<double>(n) : 0;  // an error: node's write meets it
    }
  }
  Schedule();
  return Napi::Number::New(info.Env(), r);
}

// The request header of the WR linkTake just filled `hdr` with, at b (LINK_REQ_HEADER bytes,
// little-endian, frames.ts's layout); the frame's length (header and payload).
size_t SoftDevice::WriteRequestHeader(uint8_t* b, uint32_t reqId, const double* hdr) {
  namespace abi = rdmajs::abi;
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the link's wire is little-endian, copied as such");
  static_assert(48 + 4 == abi::LINK_REQ_HEADER, "the last field written below ends the header");
  auto u32 = [&](size_t at, uint32_t v) { std::memcpy(b + at, &v, 4); };
  uint32_t opcode = soft::to_u32(hdr[abi::LINK_OPCODE]);
  uint32_t length = soft::to_u32(hdr[abi::LINK_LENGTH]);
  uint32_t frame = abi::LINK_REQ_HEADER + (opcode == abi::OP_RDMA_READ ? 0 : length);
  u32(0, frame);
  u32(4, reqId);
  b[8] = static_cast<uint8_t>(opcode);
  b[9] = static_cast<uint8_t>((hdr[abi::LINK_HEAD] == 1 ? abi::LINK_FLAG_HEAD : 0) | abi::LINK_FLAG_ANSWER_BACK |
                              (hdr[abi::LINK_SOLICITED] == 1 ? abi::LINK_FLAG_SOLICITED : 0));
  b[10] = 0;
  b[11] = 0;
  u32(12, soft::to_u32(hdr[abi::LINK_IMM]));
  double addr = hdr[abi::LINK_REMOTE_ADDR];  // a double on the wire, as JS writes it
  std::memcpy(b + 16, &addr, 8);
  u32(24, soft::to_u32(hdr[abi::LINK_RKEY]));
  u32(28, length);
  u32(32, soft::to_u32(hdr[abi::LINK_DST_SLOT]));
  u32(36, soft::to_u32(hdr[abi::LINK_DST_GEN]));
  u32(40, soft::to_u32(hdr[abi::LINK_SRC_QPN]));
  u32(44, soft::to_u32(hdr[abi::LINK_SRC_PID]));
  u32(48, soft::to_u32(hdr[abi::LINK_TOKEN]));
  return frame;
}

bool SoftDevice::ReadRequestHeader(const uint8_t* b, size_t avail, LinkRequest* r) {
  namespace abi = rdmajs::abi;
  if (avail < static_cast<size_t>(abi::LINK_REQ_HEADER)) return false;
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b + at, 4);
    return v;
  };
  r->frameLen = u32(0);
  r->reqId = u32(4);
  r->opcode = b[8];
  r->flags = b[9];
  r->imm = u32(12);
  double addr;
  std::memcpy(&addr, b + 16, 8);  // a double on the wire, as JS writes it
  r->rkey = u32(24);
  r->length = u32(28);
  r->slot = u32(32);
  r->gen = u32(36);
  r->srcQpn = u32(40);
  r->srcPid = u32(44);
  r->token = u32(48);
  // Flag bits nobody defined are a malformed frame, not something to ignore.
  if ((r->flags & ~(abi::LINK_FLAG_HEAD | abi::LINK_FLAG_ANSWER_BACK | abi::LINK_FLAG_SOLICITED)) != 0) return false;
  if (r->opcode > abi::OP_LAST) return false;
  // Solicited means something only on an operation that completes a receive.
  if ((r->flags & abi::LINK_FLAG_SOLICITED) != 0 && !soft::consumes_recv(r->opcode)) return false;
  bool atomic = r->opcode == abi::OP_ATOMIC_CMP_AND_SWP || r->opcode == abi::OP_ATOMIC_FETCH_AND_ADD;
  if (atomic && r->length != abi::ATOMIC_OPERAND_WORDS * 8) return false;
  uint64_t expect = abi::LINK_REQ_HEADER + (r->opcode == abi::OP_RDMA_READ ? 0 : static_cast<uint64_t>(r->length));
  if (r->frameLen != expect || r->frameLen != avail) return false;
  // A safe integer, as Number.isSafeInteger (NaN and infinities fail the comparisons).
  if (!(addr >= 0 && addr <= 9007199254740991.0) || addr != std::floor(addr)) return false;
  r->remoteAddr = static_cast<uint64_t>(addr);
  r->remoteAddrWire = addr;
  return true;
}

// A record word as an index below `limit`: finite, integral, in range.
static bool IndexWord(double w, size_t limit, size_t* out) {
  if (!(w >= 0 && w <= static_cast<double>(limit)) || w != std::floor(w)) return false;
  *out = static_cast<size_t>(w);
  return true;
}

Napi::Value SoftDevice::RespondFrame(const Napi::CallbackInfo& info) {
  namespace abi = rdmajs::abi;
  if (!Alive(info)) return info.Env().Undefined();
  ArrayView rec;
  ArrayView frame;
  ArrayView out;
  if (!ArrayArg(info, 0, napi_float64_array, &rec) || !ArrayArg(info, 1, napi_uint8_array, &frame) ||
      !ArrayArg(info, 2, napi_uint8_array, &out))
    return info.Env().Undefined();
  if (rec.length < static_cast<size_t>(abi::FRAME_WORDS)) {
    Fail(info, EINVAL, "respondFrame: the record is shorter than FRAME_WORDS", "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  double* r = rec.f64();
  // Consumed before anything can refuse the call (as linkTake's LINK_IN_* words).
  bool wake = r[abi::FRAME_IN_WAKE] == 1;
  r[abi::FRAME_IN_WAKE] = 0;
  r[abi::FRAME_READY] = -1;
  size_t off = 0;
  size_t len = 0;
  size_t at = 0;
  if (!IndexWord(r[abi::FRAME_IN_OFFSET], frame.bytes, &off) ||
      !IndexWord(r[abi::FRAME_IN_LENGTH], frame.bytes - off, &len) ||
      !IndexWord(r[abi::FRAME_IN_OUT_AT], out.bytes, &at)) {
    Fail(info, EINVAL, "respondFrame: the frame or its answer lies past its buffer", "ERR_RDMA_INVALID_ARG");
    return info.Env().Undefined();
  }
  const Napi::Value notRun = Napi::Number::New(info.Env(), abi::FRAME_NOT_RUN);
  if (out.bytes - at < static_cast<size_t>(abi::LINK_RES_HEADER)) return notRun;
  // Peer bytes: every field checked before use; anything but the common case is JS's.
  LinkRequest q;
  if (!ReadRequestHeader(frame.u8() + off, len, &q)) return notRun;
  if (q.opcode > abi::OP_RDMA_WRITE_WITH_IMM) return notRun;  // READs and atomics carry data back
  // The pair JS holds the state of, at the token it expects next (0: none; a resend of a WR
  // it ran is never this token, JS made sure): exactly the frames its own checks would run.
  double token = r[abi::FRAME_IN_TOKEN];
  if (token == 0 || q.token != token || q.slot != r[abi::FRAME_IN_SLOT] || q.gen != r[abi::FRAME_IN_GEN] ||
      q.srcPid != r[abi::FRAME_IN_SRC_PID] || q.srcQpn != r[abi::FRAME_IN_SRC_QPN])
    return notRun;
  uint8_t* payload = frame.u8() + off + abi::LINK_REQ_HEADER;
  soft::Answer a =
      dev_->respond(q.slot, q.gen, q.opcode, payload, q.length, q.imm, q.remoteAddr, q.rkey, q.srcQpn, q.srcPid, false,
                    (q.flags & abi::LINK_FLAG_SOLICITED) != 0);
  // As respond(): the wake-up and the answer's flush after this turn's I/O.
  if (dev_->takeSelfRing()) doorbellOwed_ = true;
  linkFlushOwed_ = true;
  ArmFlush();
  uint32_t rnr = a.rnrTimer & 31;
  // The answer's header (frames.ts writeResponseHeader): no data for a SEND or WRITE.
  uint8_t* h = out.u8() + at;
  uint32_t word = static_cast<uint32_t>(abi::LINK_RES_HEADER) | abi::LINK_ANSWER_BIT;
  std::memcpy(h, &word, 4);
  std::memcpy(h + 4, &q.reqId, 4);
  h[8] = static_cast<uint8_t>(a.outcome);
  h[9] = a.status;
  uint16_t rnr16 = static_cast<uint16_t>(rnr);
  std::memcpy(h + 10, &rnr16, 2);
  r[abi::FRAME_OUTCOME] = a.outcome;
  r[abi::FRAME_STATUS] = a.status;
  r[abi::FRAME_RNR_TIMER] = rnr;
  r[abi::FRAME_OPCODE] = q.opcode;
  r[abi::FRAME_REMOTE_ADDR] = q.remoteAddrWire;
  r[abi::FRAME_RKEY] = q.rkey;
  r[abi::FRAME_LENGTH] = q.length;
  // The read's last frame: its wake-ups taken here, not in a wakeOwed crossing of their own.
  if (wake) r[abi::FRAME_READY] = TakeReadyNow();
  return Napi::Number::New(info.Env(), a.outcome);
}

// linkWrite(h, fd, frame, headerBytes): the WR just taken deferred, from its memory to the
// socket; the bytes written (the rest copied into `frame` at its place), or -1.
Napi::Value SoftDevice::LinkWrite(const Napi::CallbackInfo& info) {
  int h;
  ArrayView frame;
  if (!QpArg(info, 0, &h) || !ArrayArg(info, 2, napi_uint8_array, &frame)) return info.Env().Undefined();
  double fd = Num(info, 1);
  size_t hdrBytes = U32(info, 3);
  int64_t n = dev_->linkWrite(h, std::isfinite(fd) && fd >= 0 && fd <= INT32_MAX ? static_cast<int>(fd) : -1,
                              frame.u8(), hdrBytes, frame.bytes);
  return Napi::Number::New(info.Env(), static_cast<double>(n));
}

// linkSend(fd, buf, offset, length, settles): the bytes of a link connection's gathered
// frames, sent at once when nothing of the connection is queued in node (the caller checked):
// node's write makes a request object, a stream pass and a callback per write for the same one
// syscall. `settles` true: these bytes are the last the link's flush was owed for, so it is
// called off here (what linkFlushSoon(false) did in a crossing of its own, every round trip).
Napi::Value SoftDevice::LinkSend(const Napi::CallbackInfo& info) {
  double fd = Num(info, 0);
  const uint8_t* data = nullptr;
  size_t len = 0;
  if (!RangeArg(info, 1, &data, &len)) return info.Env().Undefined();
  if (info.Length() > 4 && info[4].IsBoolean() && info[4].As<Napi::Boolean>().Value()) linkFlushOwed_ = false;
  if (!std::isfinite(fd) || fd < 0 || fd > INT32_MAX) return Napi::Number::New(info.Env(), -EBADF);
  ssize_t n = send(static_cast<int>(fd), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  return Napi::Number::New(info.Env(), n >= 0 ? static_cast<double>(n) : -static_cast<double>(errno));
}

// The bytes [offset, offset + length) of the Uint8Array argument i, checked against it.
bool SoftDevice::RangeArg(const Napi::CallbackInfo& info, size_t i, const uint8_t** data, size_t* len) {
  ArrayView d;
  if (!ArrayArg(info, i, napi_uint8_array, &d)) return false;
  size_t off = U32(info, i + 1);
  size_t n = U32(info, i + 2);
  if (off > d.bytes || n > d.bytes - off) {
    Fail(info, EINVAL, "range past the end of its buffer", "ERR_RDMA_INVALID_ARG");
    return false;
  }
  *data = d.u8() + off;
  *len = n;
  return true;
}

Napi::Value SoftDevice::LinkDone(const Napi::CallbackInfo& info) {
  namespace abi = rdmajs::abi;
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  const uint8_t* data = nullptr;
  size_t len = 0;
  // data: (buffer, offset, length), the answer's bytes where the reader has them (no copy).
  if (info[3].IsTypedArray() && !RangeArg(info, 3, &data, &len)) return info.Env().Undefined();
  // The answer's outcome, status and RNR timer in one word (abi.h LINK_DONE_*_SHIFT): six
  // arguments at most, so node-addon-api keeps them on the stack.
  uint32_t packed = U32(info, 2);
  // JS takes the WRs this answer lets go right after it (the owner's onLink).
  dev_->jsTakesLink = true;
  dev_->deferSelfRing = true;
  bool take = dev_->linkDone(h, U32(info, 1), static_cast<int>(packed & 0xff),
                             static_cast<uint8_t>((packed >> abi::LINK_DONE_STATUS_SHIFT) & 0xff),
                             std::min<uint32_t>(packed >> abi::LINK_DONE_RNR_SHIFT, 31), data, len);
  dev_->jsTakesLink = false;
  dev_->deferSelfRing = false;
  // A completion it made woke one of this device's CQs: delivered after this turn's I/O, as
  // respond's (no eventfd write, poll and read per answer).
  if (dev_->takeSelfRing()) {
    doorbellOwed_ = true;
    ArmFlush();
  }
  Schedule();
  // Whether WRs are ready for JS to take now (it takes them right after: no call to ask).
  return Napi::Boolean::New(info.Env(), take);
}

Napi::Value SoftDevice::LinkProgress(const Napi::CallbackInfo& info) {
  int h;
  if (!QpArg(info, 0, &h)) return info.Env().Undefined();
  dev_->linkProgress(h);
  Schedule();
  return info.Env().Undefined();
}

// respond's and place's arguments: the record (RESPOND_WORDS), then (buffer, offset, length)
// of bytes where the link's reader has them (no copy). False with an error thrown.
bool SoftDevice::RespondArgs(const Napi::CallbackInfo& info, const char* who, double** record, const uint8_t** bytes,
                             size_t* len) {
  if (!Alive(info)) return false;
  ArrayView rec;
  if (!ArrayArg(info, 0, napi_float64_array, &rec) || !RangeArg(info, 1, bytes, len)) return false;
  if (rec.length < static_cast<size_t>(rdmajs::abi::RESPOND_WORDS)) {
    Fail(info, EINVAL, std::string(who) + ": the record is shorter than RESPOND_WORDS", "ERR_RDMA_INVALID_ARG");
    return false;
  }
  *record = rec.f64();
  return true;
}

Napi::Value SoftDevice::Respond(const Napi::CallbackInfo& info) {
  namespace abi = rdmajs::abi;
  double* r = nullptr;
  const uint8_t* bytes = nullptr;
  size_t len = 0;
  if (!RespondArgs(info, "respond", &r, &bytes, &len)) return info.Env().Undefined();
  auto u = [&](int i) { return soft::to_u32(r[i]); };
  // A WRITE placed ahead (place()): its length is in the record, its bytes are in memory.
  uint64_t placed = soft::to_u64(r[abi::RESPOND_PLACED]);
  soft::Answer a = dev_->respond(u(abi::RESPOND_SLOT), u(abi::RESPOND_GEN),
                                 static_cast<uint8_t>(std::min<uint32_t>(u(abi::RESPOND_OPCODE), 255)),
                                 placed ? nullptr : const_cast<uint8_t*>(bytes), placed ? placed : len,
                                 u(abi::RESPOND_IMM), soft::to_u64(r[abi::RESPOND_REMOTE_ADDR]), u(abi::RESPOND_RKEY),
                                 u(abi::RESPOND_SRC_QPN), u(abi::RESPOND_SRC_PID), placed != 0,
                                 r[abi::RESPOND_SOLICITED] == 1);
  // The target's own doorbell, if rung, is delivered after this turn's I/O (no eventfd),
  // and then the link's flush writes the answer (no linkFlushSoon() crossing for it).
  if (dev_->takeSelfRing()) doorbellOwed_ = true;
  linkFlushOwed_ = true;
  ArmFlush();
  r[abi::RESPOND_OUTCOME] = a.outcome;
  r[abi::RESPOND_STATUS] = a.status;
  r[abi::RESPOND_RNR_TIMER] = a.rnrTimer & 31;
  return Napi::Number::New(info.Env(), a.outcome);
}

Napi::Value SoftDevice::Place(const Napi::CallbackInfo& info) {
  namespace abi = rdmajs::abi;
  double* r = nullptr;
  const uint8_t* bytes = nullptr;
  size_t len = 0;
  if (!RespondArgs(info, "place", &r, &bytes, &len)) return info.Env().Undefined();
  auto u = [&](int i) { return soft::to_u32(r[i]); };
  bool ok = dev_->place(u(abi::RESPOND_SLOT), u(abi::RESPOND_GEN), soft::to_u64(r[abi::RESPOND_REMOTE_ADDR]),
                        u(abi::RESPOND_RKEY), soft::to_u64(r[abi::RESPOND_PLACED]), u(abi::RESPOND_SRC_QPN),
                        u(abi::RESPOND_SRC_PID), soft::to_u64(Num(info, 4)), bytes, len);
  return Napi::Boolean::New(info.Env(), ok);
}

}  // namespace rdmajs

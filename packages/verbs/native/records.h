// The named objects cold-path native methods return or take (src/internal/native.ts
// declares them): built with Napi::Object and read with checked getters, so no position of
// a tuple means one thing on one provider and another on the other. Hot paths use fixed
// records instead (abi.h: the post record).
#pragma once

#include <napi.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "addon.h"

namespace rdmajs {

// allocMr / regMr → { handle, addr, lkey, rkey }, plus `buffer` (the registered memory)
// for allocMr.
inline Napi::Object mr_record(Napi::Env env, int handle, uint64_t addr, uint32_t lkey, uint32_t rkey,
                              const Napi::ArrayBuffer* buffer = nullptr) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("handle", handle);
  if (buffer) o.Set("buffer", *buffer);
  o.Set("addr", static_cast<double>(addr));
  o.Set("lkey", lkey);
  o.Set("rkey", rkey);
  return o;
}

// The fields of an attribute object JS built (modifyQp's `attr`). JS validated them; a
// missing field, or one that is not an integer in its range, is still refused here (a bug
// there, or a call from elsewhere): ERR_RDMA_INVALID_ARG naming the field. After the first
// failure nothing more is read and ok() is false, with the error pending.
class Attr {
 public:
  Attr(const Napi::CallbackInfo& info, size_t i, const char* who) : env_(info.Env()), who_(who) {
    if (i < info.Length() && info[i].IsObject()) {
      obj_ = info[i].As<Napi::Object>();
    } else {
      Fail("an attribute object");
    }
  }

  bool ok() const { return ok_; }

  // An integer field in [lo, hi] (0 once failed).
  double Int(const char* name, double lo, double hi) {
    if (!ok_) return 0;
    napi_value v;
    double d = 0;
    if (napi_get_named_property(env_, obj_, name, &v) != napi_ok || napi_get_value_double(env_, v, &d) != napi_ok ||
        !(d >= lo && d <= hi && d == std::floor(d))) {
      Fail(std::string("`") + name + "` an integer in [" + Str(lo) + ", " + Str(hi) + "]");
      return 0;
    }
    return d;
  }
  uint32_t U32(const char* name, uint32_t hi = UINT32_MAX) { return static_cast<uint32_t>(Int(name, 0, hi)); }

  // An array field of exactly n integers in [0, 2^32) into out (zeros once failed).
  void Words(const char* name, uint32_t* out, uint32_t n) {
    for (uint32_t k = 0; k < n; k++) out[k] = 0;
    if (!ok_) return;
    napi_value v;
    bool array = false;
    uint32_t len = 0;
    if (napi_get_named_property(env_, obj_, name, &v) != napi_ok || napi_is_array(env_, v, &array) != napi_ok ||
        !array || napi_get_array_length(env_, v, &len) != napi_ok || len != n) {
      Fail(std::string("`") + name + "` an array of " + std::to_string(n) + " 32-bit words");
      return;
    }
    for (uint32_t k = 0; k < n && ok_; k++) {
      napi_value e;
      double d = -1;
      if (napi_get_element(env_, v, k, &e) != napi_ok || napi_get_value_double(env_, e, &d) != napi_ok ||
          !(d >= 0 && d <= UINT32_MAX && d == std::floor(d))) {
        Fail(std::string("`") + name + "` an array of " + std::to_string(n) + " 32-bit words");
        return;
      }
      out[k] = static_cast<uint32_t>(d);
    }
  }

 private:
  static std::string Str(double d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", d);
    return b;
  }
  void Fail(const std::string& what) {
    ok_ = false;
    std::string why = std::string(who_) + " needs " + what;
    system_error(env_, who_, EINVAL, why.c_str(), "ERR_RDMA_INVALID_ARG").ThrowAsJavaScriptException();
  }

  Napi::Env env_;
  Napi::Object obj_;
  const char* who_;
  bool ok_ = true;
};

}  // namespace rdmajs

// Numbers from JS and from peers, converted without undefined behaviour: a double outside
// the target type's range (NaN, negative, >= 2^64, a forged frame field) saturates instead
// of being an out-of-range cast. The JS side validates; this keeps a bug there (or a record
// rewritten behind its checks) from becoming a wild address or a wrapped length here. One
// definition for both providers (soft/wire.h, ibv/post.cc).
#pragma once

#include <cstdint>

namespace rdmajs {

inline uint64_t to_u64(double v) {
  if (!(v > 0)) return 0;  // NaN and negatives
  if (v >= 18446744073709551616.0) return UINT64_MAX;
  return static_cast<uint64_t>(v);
}

inline uint32_t to_u32(double v) {
  if (!(v > 0)) return 0;
  if (v >= 4294967295.0) return UINT32_MAX;
  return static_cast<uint32_t>(v);
}

}  // namespace rdmajs

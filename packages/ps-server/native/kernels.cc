// Batch kernels of one sparse table: gather (probe + row copy) and push (probe, duplicate
// accumulation, optimizer update), one JS → C++ crossing per batch. The table's chunk arrays
// and hash index arrays are registered once (persistent references keep them alive); the
// kernels read them in place. Float arithmetic is plain IEEE float32 (built with
// -ffp-contract=off, no -ffast-math), which is exactly what the JS reference computes with
// Math.fround after each double op (double rounding is innocuous for + - * / sqrt on floats).
// -fvect-cost-model=dynamic lets -O2 vectorize loops of a run-time length (the optimizer rows):
// element-wise, so the vector lanes round exactly as the scalar code does.
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RDMAJS_PS_AVX2 1
#endif

#include "abi.h"
#include "crc32c.h"
#include "fp16.h"

namespace abi = rdmajs_ps::abi;
using rdmajs_ps::FloatToHalf;
using rdmajs_ps::HalfToFloat;

namespace {

// murmur3's finalizer and the index hash: @rdmajs/ps-wire src/Hash.ts (one definition, shared
// with the one-sided reader): native probes of the index JS builds find nothing if they differ.
inline uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

inline uint32_t Hash64(uint32_t lo, uint32_t hi, uint32_t salt) { return Fmix32(lo ^ Fmix32(hi ^ salt)); }

// Hashes of n keys (lo/hi pairs in k32) into h.
void HashKeys(const uint32_t* k32, int64_t n, uint32_t salt, uint32_t* h) {
  for (int64_t i = 0; i < n; i++) h[i] = Hash64(k32[2 * i], k32[2 * i + 1], salt);
}

#if defined(RDMAJS_PS_AVX2)
// The same hashes 8 keys at a time (the baseline x86-64 target has no 32-bit vector multiply,
// so the compiler leaves HashKeys scalar). Chosen at load time where the CPU has AVX2.
__attribute__((target("avx2"))) inline __m256i Fmix32x8(__m256i h) {
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85ebca6bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xc2b2ae35u)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

__attribute__((target("avx2"))) void HashKeysAvx2(const uint32_t* k32, int64_t n, uint32_t salt, uint32_t* h) {
  const __m256i s = _mm256_set1_epi32(static_cast<int>(salt));
  const __m256i evensOdds = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // Keys i … i+7: [lo hi lo hi …] → lo × 8 and hi × 8.
    const __m256i a = _mm256_permutevar8x32_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k32 + 2 * i)), evensOdds);
    const __m256i b = _mm256_permutevar8x32_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k32 + 2 * i + 8)), evensOdds);
    const __m256i lo = _mm256_permute2x128_si256(a, b, 0x20), hi = _mm256_permute2x128_si256(a, b, 0x31);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + i), Fmix32x8(_mm256_xor_si256(lo, Fmix32x8(_mm256_xor_si256(hi, s)))));
  }
  // Clean upper register halves before SSE code runs again: GCC 12 leaves them dirty before
  // the tail call below, and the SSE optimizer kernels after it then ran 5× slower (measured).
  _mm256_zeroupper();
  HashKeys(k32 + 2 * i, n - i, salt, h + i);
}

// The CPU's features, read when the addon loads (__builtin_cpu_init first: these run as static
// initializers, possibly before libgcc's own).
bool CpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

bool CpuHasAvx512f() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

using HashKeysFn = void (*)(const uint32_t*, int64_t, uint32_t, uint32_t*);
const HashKeysFn kHashKeys = CpuHasAvx2() ? HashKeysAvx2 : HashKeys;
#else
constexpr auto kHashKeys = HashKeys;
#endif

// What a gather's copy pass reads: each chunk's f32 rows and the batch's slots; whether to
// prefetch rows ahead of the copy (TableKernels::PrefetchRows).
struct F32Rows {
  float* const* base;
  const int32_t* slots;
  int shift;
  uint32_t cmask;
  int64_t dim;
  bool prefetch;
};

// Rows ahead of the copy that CopyF32RowsBody prefetches.
constexpr int64_t kCopyAhead = 16;

// Rows of the n slots into out[i·dim …] (constant-size copies when kDim is not 0: inlined
// moves, no memcpy call per row); the request positions of slots < 0 into miss. Misses.
template <int64_t kDim>
inline int32_t CopyF32RowsBody(const F32Rows& r, int64_t n, float* out, int32_t* miss) {
  const int64_t dim = kDim != 0 ? kDim : r.dim;
  const size_t rowBytes = static_cast<size_t>(dim) * 4;
  int32_t misses = 0;
  for (int64_t i = 0; i < n; i++) {
    // Slots were checked by the probe pass; the first two lines of a row (a dim-32 row's all).
    if (r.prefetch && i + kCopyAhead < n && r.slots[i + kCopyAhead] >= 0) {
      const uint32_t t = static_cast<uint32_t>(r.slots[i + kCopyAhead]);
      const char* row = reinterpret_cast<const char*>(r.base[t >> r.shift] + (t & r.cmask) * dim);
      __builtin_prefetch(row);
      if (rowBytes > 64) __builtin_prefetch(row + 64);
    }
    const int32_t s = r.slots[i];
    if (s < 0) {
      miss[misses++] = static_cast<int32_t>(i);
      std::memset(out + i * dim, 0, rowBytes);  // zeros, as gather promises
      continue;
    }
    const float* src = r.base[static_cast<uint32_t>(s) >> r.shift] + (static_cast<uint32_t>(s) & r.cmask) * dim;
    std::memcpy(out + i * dim, src, rowBytes);
  }
  return misses;
}

template <int64_t kDim>
int32_t CopyF32Rows(const F32Rows& r, int64_t n, float* out, int32_t* miss) {
  return CopyF32RowsBody<kDim>(r, n, out, miss);
}

#if defined(RDMAJS_PS_AVX2)
// The same with 64-byte moves where the CPU has AVX-512 (a 128-byte row is two, not eight).
template <int64_t kDim>
__attribute__((target("avx512f"))) int32_t CopyF32RowsAvx512(const F32Rows& r, int64_t n, float* out,
                                                             int32_t* miss) {
  return CopyF32RowsBody<kDim>(r, n, out, miss);
}

// The same for rows of a multiple of 16 floats into an `out` that is not 64-byte aligned (a
// large Float32Array's memory usually starts 16 bytes into a page): the batch's rows form one
// contiguous stream of floats, so each aligned 64-byte line of `out` is the tail of one
// 16-float vector of that stream and the head of the next (vpermt2d), stored whole and
// aligned — instead of every 64-byte store straddling two lines. The partial lines at both
// ends are masked stores that write only inside out[0 … n·kDim). A miss's row is written as
// zeros (the caller fills its init row afterwards, as before). Pure data movement: the bits
// are those of the rows.
template <int64_t kDim>
__attribute__((target("avx512f"))) int32_t CopyF32RowsAvx512Stream(const F32Rows& r, int64_t n, float* out,
                                                                   int32_t* miss) {
  static_assert(kDim % 16 == 0, "whole 16-float vectors per row");
  constexpr int64_t kVecs = kDim / 16;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(out);
  const int off = static_cast<int>((addr % 64) / 4);  // out[0]'s lane in its line
  int32_t* line = reinterpret_cast<int32_t*>(addr - static_cast<uintptr_t>(off) * 4);
  // Lane j of an output line: lane 16 − off + j of the concatenation (previous, next vector).
  const __m512i shift = _mm512_add_epi32(_mm512_set1_epi32(16 - off),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 headMask = static_cast<__mmask16>(0xffffu << off), tailMask = static_cast<__mmask16>(~headMask);
  __m512i prev = _mm512_setzero_si512();
  bool first = true;
  int32_t misses = 0;
  for (int64_t i = 0; i < n; i++) {
    if (r.prefetch && i + kCopyAhead < n && r.slots[i + kCopyAhead] >= 0) {
      const uint32_t t = static_cast<uint32_t>(r.slots[i + kCopyAhead]);
      const char* row = reinterpret_cast<const char*>(r.base[t >> r.shift] + (t & r.cmask) * kDim);
      __builtin_prefetch(row);
      __builtin_prefetch(row + 64);
    }
    const int32_t s = r.slots[i];
    const float* src = nullptr;
    if (s < 0)
      miss[misses++] = static_cast<int32_t>(i);
    else
      src = r.base[static_cast<uint32_t>(s) >> r.shift] + (static_cast<uint32_t>(s) & r.cmask) * kDim;
    for (int64_t c = 0; c < kVecs; c++) {
      const __m512i v = src != nullptr ? _mm512_loadu_si512(src + 16 * c) : _mm512_setzero_si512();
      const __m512i l = _mm512_permutex2var_epi32(prev, shift, v);
      if (first) {
        _mm512_mask_storeu_epi32(line, headMask, l);
        first = false;
      } else {
        _mm512_store_si512(line, l);
      }
      line += 16;
      prev = v;
    }
  }
  if (!first) _mm512_mask_storeu_epi32(line, tailMask, _mm512_permutex2var_epi32(prev, shift, prev));
  _mm256_zeroupper();
  return misses;
}

const bool kAvx512 = CpuHasAvx512f();
const bool kAvx2 = CpuHasAvx2();
#endif

// A bucket's tag: HashIndex.ts tagOf.
inline uint8_t TagOf(uint32_t hash) {
  const uint32_t t = hash >> 24;
  return static_cast<uint8_t>(t == abi::IDX_TAG_EMPTY ? 1 : t);
}

static_assert(abi::IDX_TAG_PAD == 16, "TagGroup compares 16 tags");

// The 16 tags from g: bit k of *match is set where g[k] == tag, of *empty where g[k] is the
// empty tag.
inline void TagGroup(const uint8_t* g, uint8_t tag, uint32_t* match, uint32_t* empty) {
#if defined(__SSE2__)
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g));
  *match = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(static_cast<char>(tag)))));
  *empty = static_cast<uint32_t>(
      _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(static_cast<char>(abi::IDX_TAG_EMPTY)))));
#else
  // SWAR: exact zero-byte masks of 8 bytes, packed to 8 bits.
  constexpr uint64_t k7f = 0x7f7f7f7f7f7f7f7full, k01 = 0x0101010101010101ull;
  auto zeros = [](uint64_t x) {
    const uint64_t hi = ~(((x & k7f) + k7f) | x | k7f);  // 0x80 in each zero byte
    return static_cast<uint32_t>(((hi >> 7) * 0x0102040810204080ull) >> 56);
  };
  uint64_t a, b;
  std::memcpy(&a, g, 8);
  std::memcpy(&b, g + 8, 8);
  const uint64_t t = k01 * tag, e = k01 * static_cast<uint8_t>(abi::IDX_TAG_EMPTY);
  *match = zeros(a ^ t) | (zeros(b ^ t) << 8);
  *empty = zeros(a ^ e) | (zeros(b ^ e) << 8);
#endif
}

struct Chunk {
  Napi::Reference<Napi::TypedArray> rowsRef, stateRef, stepsRef, lastMsRef;
  float* f32 = nullptr;
  uint16_t* f16 = nullptr;
  float* state = nullptr;
  uint32_t* steps = nullptr;
  const double* lastMs = nullptr;  // TTL tables: each row's last push time
  // One-sided readable tables: the slots' meta records (VIEW_META_INTS words each, the seq
  // first) in the table's store view; null otherwise.
  Napi::Reference<Napi::TypedArray> metaRef;
  uint32_t* meta = nullptr;
};

// The store view's seqlock, writer side (ps-wire README "Store view"): the slot's seq made
// odd before its row changes and even (advanced) after, with release fences so no row store
// becomes visible before the odd seq or after the even one. Readers (other processes, NICs)
// copy seq, row, seq and accept the row only when both seqs are the same even value.
inline void SeqBegin(uint32_t* seq) {
  __atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}
inline void SeqEnd(uint32_t* seq) {
  __atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}

// The element data of a typed array (its byte offset applied). Through the typed array's own
// info, not its buffer's: napi_get_arraybuffer_info refuses a SharedArrayBuffer ("Invalid
// argument"), and a one-sided readable table may live in shared memory.
template <typename T>
T* DataOf(const Napi::TypedArray& a) {
  void* data = nullptr;
  napi_get_typedarray_info(a.Env(), a, nullptr, nullptr, &data, nullptr, nullptr);
  return static_cast<T*>(data);
}

class TableKernels : public Napi::ObjectWrap<TableKernels> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "TableKernels",
                       {
                           InstanceMethod("addChunk", &TableKernels::AddChunk),
                           InstanceMethod("setIndex", &TableKernels::SetIndex),
                           InstanceMethod("gather", &TableKernels::Gather),
                           InstanceMethod("lookup", &TableKernels::Lookup),
                           InstanceMethod("apply", &TableKernels::Apply),
                           InstanceMethod("update", &TableKernels::UpdateRows),
                           InstanceMethod("clear", &TableKernels::Clear),
                       });
  }

  // new TableKernels(dim, rowDtype, stateDim, chunkShift, usesSteps, kind, params: Float64Array,
  //                  ttlMs: Infinity without TTL, saturate: boolean)
  explicit TableKernels(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TableKernels>(info) {
    Napi::Env env = info.Env();
    if (info.Length() != 9 || !info[6].IsTypedArray() ||
        info[6].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array || !info[7].IsNumber()) {
      Napi::TypeError::New(env,
                           "TableKernels(dim, rowDtype, stateDim, chunkShift, usesSteps, kind, params, ttlMs, saturate)")
          .ThrowAsJavaScriptException();
      return;
    }
    saturate_ = info[8].ToBoolean().Value();
    ttl_ = info[7].As<Napi::Number>().DoubleValue();
    hasTtl_ = std::isfinite(ttl_);
    if (!(ttl_ > 0)) {
      Napi::RangeError::New(env, "TableKernels: ttlMs must be > 0").ThrowAsJavaScriptException();
      return;
    }
    dim_ = info[0].As<Napi::Number>().Int64Value();
    rowDtype_ = info[1].As<Napi::Number>().Int32Value();
    stateDim_ = info[2].As<Napi::Number>().Int64Value();
    chunkShift_ = info[3].As<Napi::Number>().Int32Value();
    usesSteps_ = info[4].ToBoolean().Value();
    kind_ = info[5].As<Napi::Number>().Int32Value();
    auto p = info[6].As<Napi::Float64Array>();
    params_.assign(p.Data(), p.Data() + p.ElementLength());
    int want = -1;
    switch (kind_) {
      case abi::OPT_SGD: want = abi::OPT_SGD_PARAMS; break;
      case abi::OPT_SGD_MOMENTUM: want = abi::OPT_SGD_MOMENTUM_PARAMS; break;
      case abi::OPT_ADAGRAD: want = abi::OPT_ADAGRAD_PARAMS; break;
      case abi::OPT_FTRL: want = abi::OPT_FTRL_PARAMS; break;
      case abi::OPT_ADAM:
      case abi::OPT_ADAMW: want = abi::OPT_ADAM_PARAMS; break;
      case abi::OPT_SUM:
      case abi::OPT_ASSIGN: want = 0; break;
      default: break;
    }
    if (kind_ == abi::OPT_ADAM || kind_ == abi::OPT_ADAMW) scalarsPerKey_ = abi::OPT_ADAM_STEP_SCALARS;
    // Adam reads m and v (2 × dim state floats) and needs per-row steps for its scalars.
    if ((scalarsPerKey_ > 0 && (stateDim_ != 2 * dim_ || !usesSteps_)) || (kind_ == abi::OPT_FTRL && stateDim_ != 2 * dim_) ||
        ((kind_ == abi::OPT_SGD_MOMENTUM || kind_ == abi::OPT_ADAGRAD) && stateDim_ != dim_)) {
      Napi::RangeError::New(env, "TableKernels: state size does not fit the kernel").ThrowAsJavaScriptException();
      return;
    }
    if (dim_ < 1 || dim_ > 4096 || stateDim_ < 0 || stateDim_ > 4 * 4096 || chunkShift_ < 0 || chunkShift_ > 24 ||
        (rowDtype_ != abi::ROW_F32 && rowDtype_ != abi::ROW_F16) || want < 0 ||
        static_cast<int>(params_.size()) != want) {
      Napi::RangeError::New(env, "TableKernels: bad shape, kernel kind or parameter count").ThrowAsJavaScriptException();
      return;
    }
    tmp_.resize(dim_);
    before_.resize(dim_ + stateDim_);
  }

 private:
  int64_t ChunkRows() const { return int64_t{1} << chunkShift_; }

  static bool IsType(const Napi::Value& v, napi_typedarray_type t) {
    return v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == t;
  }

  // addChunk(rows: Float32Array | Uint16Array, state: Float32Array, steps: Uint32Array | null,
  //          lastMs: Float64Array | null[, meta: Uint32Array | null])
  Napi::Value AddChunk(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const int64_t cr = ChunkRows();
    const napi_typedarray_type rowType = rowDtype_ == abi::ROW_F32 ? napi_float32_array : napi_uint16_array;
    const bool hasMeta = info.Length() == 5 && !info[4].IsNull();
    if ((info.Length() != 4 && info.Length() != 5) || (hasMeta && !IsType(info[4], napi_uint32_array)) ||
        !IsType(info[0], rowType) || !IsType(info[1], napi_float32_array) ||
        !(info[2].IsNull() || IsType(info[2], napi_uint32_array)) || (info[2].IsNull() == usesSteps_) ||
        !(info[3].IsNull() || IsType(info[3], napi_float64_array)) || (info[3].IsNull() == hasTtl_)) {
      Napi::TypeError::New(env, "addChunk(rows, state, steps, lastMs[, meta])").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (hasTtl_ && static_cast<int64_t>(info[3].As<Napi::TypedArray>().ElementLength()) < cr) {
      Napi::RangeError::New(env, "addChunk: arrays shorter than a chunk").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto rows = info[0].As<Napi::TypedArray>();
    auto state = info[1].As<Napi::TypedArray>();
    if (static_cast<int64_t>(rows.ElementLength()) < cr * dim_ ||
        static_cast<int64_t>(state.ElementLength()) < cr * stateDim_ ||
        (usesSteps_ && static_cast<int64_t>(info[2].As<Napi::TypedArray>().ElementLength()) < cr) ||
        (hasMeta && static_cast<int64_t>(info[4].As<Napi::TypedArray>().ElementLength()) < cr * abi::VIEW_META_INTS)) {
      Napi::RangeError::New(env, "addChunk: arrays shorter than a chunk").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Chunk c;
    c.rowsRef = Napi::Persistent(rows);
    c.stateRef = Napi::Persistent(state);
    if (rowDtype_ == abi::ROW_F32)
      c.f32 = DataOf<float>(rows);
    else
      c.f16 = DataOf<uint16_t>(rows);
    c.state = DataOf<float>(state);
    if (usesSteps_) {
      auto steps = info[2].As<Napi::TypedArray>();
      c.stepsRef = Napi::Persistent(steps);
      c.steps = DataOf<uint32_t>(steps);
    }
    if (hasTtl_) {
      auto lastMs = info[3].As<Napi::TypedArray>();
      c.lastMsRef = Napi::Persistent(lastMs);
      c.lastMs = DataOf<double>(lastMs);
    }
    if (hasMeta) {
      auto meta = info[4].As<Napi::TypedArray>();
      c.metaRef = Napi::Persistent(meta);
      c.meta = DataOf<uint32_t>(meta);
    }
    rowsF32_.push_back(c.f32);
    rowBytePtrs_.push_back(c.f32 != nullptr ? reinterpret_cast<const char*>(c.f32) : reinterpret_cast<const char*>(c.f16));
    chunks_.push_back(std::move(c));
    return Napi::Number::New(env, static_cast<double>(chunks_.size()));
  }

  // setIndex(buckets: Int32Array, tags: Uint8Array, old: Int32Array | null, salt): the
  // HashIndex's live arrays (probeTables()).
  Napi::Value SetIndex(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() != 4 || !IsType(info[0], napi_int32_array) || !IsType(info[1], napi_uint8_array) ||
        !(info[2].IsNull() || IsType(info[2], napi_int32_array)) || !info[3].IsNumber()) {
      Napi::TypeError::New(env, "setIndex(buckets, tags, old, salt)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto pow2Buckets = [](size_t len, uint32_t* mask) {
      if (len == 0 || len % 3 != 0) return false;
      const size_t b = len / 3;
      if ((b & (b - 1)) != 0 || b > (size_t{1} << 29)) return false;
      *mask = static_cast<uint32_t>(b - 1);
      return true;
    };
    auto b = info[0].As<Napi::TypedArray>();
    auto t = info[1].As<Napi::TypedArray>();
    uint32_t mask = 0, oldMask = 0;
    if (!pow2Buckets(b.ElementLength(), &mask) ||
        (!info[2].IsNull() && !pow2Buckets(info[2].As<Napi::TypedArray>().ElementLength(), &oldMask))) {
      Napi::RangeError::New(env, "setIndex: a bucket array is not 3 × a power of two").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    if (t.ElementLength() != size_t{mask} + 1 + abi::IDX_TAG_PAD) {
      Napi::RangeError::New(env, "setIndex: the tag array is not buckets + IDX_TAG_PAD bytes")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    indexRef_ = Napi::Persistent(b);
    index_ = DataOf<int32_t>(b);
    tagsRef_ = Napi::Persistent(t);
    tags_ = DataOf<uint8_t>(t);
    mask_ = mask;
    useTags_ = mask + 1 <= kTagProbeMaxBuckets;
    if (info[2].IsNull()) {
      oldRef_.Reset();
      old_ = nullptr;
    } else {
      auto o = info[2].As<Napi::TypedArray>();
      oldRef_ = Napi::Persistent(o);
      old_ = DataOf<int32_t>(o);
      oldMask_ = oldMask;
    }
    salt_ = info[3].As<Napi::Number>().Uint32Value();
    return env.Undefined();
  }

  Napi::Value Clear(const Napi::CallbackInfo& info) {
    chunks_.clear();
    rowsF32_.clear();
    rowBytePtrs_.clear();
    indexRef_.Reset();
    tagsRef_.Reset();
    oldRef_.Reset();
    index_ = old_ = nullptr;
    tags_ = nullptr;
    return info.Env().Undefined();
  }

  // The live index as locals of a batch loop (members would be reloaded after every store
  // into the slots array, which may alias them).
  struct IndexView {
    const uint8_t* tags;
    const int32_t* index;
    uint32_t mask;
    bool useTags, hasOld;
  };

  // Slots of n keys (lo/hi pairs in k32) into slots: misses, or K_BAD_SLOT (a slot beyond the
  // chunks; slots before it are written). Each key's bucket (and tags) is prefetched kAhead
  // keys ahead. The first tag group (untagged: the home bucket) settles almost every key
  // inline; longer chains and the old table while growing call Get. With a call per key a
  // cache-resident gather was ~18 % slower (10^4 rows, dim 32: 36 against 30–31 µs a
  // 4096-key batch, p10, measured).
  int32_t ProbeAll(const uint32_t* k32, int64_t n, int32_t* slots) {
    HashAll(k32, n);
    const uint32_t* hs = hashes_.data();
    const IndexView v{tags_, index_, mask_, useTags_, old_ != nullptr};
    const size_t chunks = rowBytePtrs_.size();
    const int shift = chunkShift_;
    int32_t misses = 0;
    for (int64_t i = 0; i < n; i++) {
      if (i + kAhead < n) PrefetchBucket(v, hs[i + kAhead]);
      const uint32_t lo = k32[2 * i], hi = k32[2 * i + 1], hash = hs[i];
      const int32_t l = static_cast<int32_t>(lo), h = static_cast<int32_t>(hi);
      const uint32_t b = hash & v.mask;
      int32_t s;
      if (v.useTags) {
        uint32_t match, empty;
        TagGroup(v.tags + b, TagOf(hash), &match, &empty);
        if (empty != 0) match &= empty ^ (empty - 1);
        const int32_t* hit = nullptr;
        for (; match != 0; match &= match - 1) {
          const int32_t* p = v.index + size_t{(b + static_cast<uint32_t>(__builtin_ctz(match))) & v.mask} * abi::IDX_BUCKET_INTS;
          if (p[0] == l && p[1] == h) {
            hit = p;
            break;
          }
        }
        if (hit != nullptr)
          s = hit[2];
        else if (empty != 0 && !v.hasOld)
          s = -1;
        else
          s = Get(lo, hi, hash);
      } else {
        const int32_t* p = v.index + size_t{b} * abi::IDX_BUCKET_INTS;
        if (p[2] == abi::IDX_EMPTY && !v.hasOld)
          s = -1;
        else if (p[2] != abi::IDX_EMPTY && p[0] == l && p[1] == h)
          s = p[2];
        else
          s = Get(lo, hi, hash);
      }
      if (s < 0) {
        misses++;
      } else if ((static_cast<uint32_t>(s) >> shift) >= chunks) {
        return abi::K_BAD_SLOT;
      }
      slots[i] = s;
    }
    return misses;
  }

  // The whole probe: the live table is probed 16 tags at a time, reading only buckets whose
  // tag matches, up to the chain's first empty bucket (up to kTagProbeMaxBuckets; larger
  // ones, and the old one while growing, bucket by bucket). Each probe is bounded by its
  // table's size.
  __attribute__((noinline)) int32_t Get(uint32_t lo, uint32_t hi, uint32_t hash) const {
    const int32_t l = static_cast<int32_t>(lo), h = static_cast<int32_t>(hi);
    const uint8_t tag = TagOf(hash);
    uint32_t i = hash & mask_;
    if (useTags_) {
      for (uint32_t n = 0; n <= mask_; n += abi::IDX_TAG_PAD) {
        uint32_t match, empty;
        TagGroup(tags_ + i, tag, &match, &empty);
        if (empty != 0) match &= empty ^ (empty - 1);  // buckets before the first empty one
        for (; match != 0; match &= match - 1) {
          const int32_t* p = index_ + size_t{(i + static_cast<uint32_t>(__builtin_ctz(match))) & mask_} * abi::IDX_BUCKET_INTS;
          if (p[0] == l && p[1] == h) return p[2];
        }
        if (empty != 0) break;
        i = (i + abi::IDX_TAG_PAD) & mask_;
      }
    } else {
      for (uint32_t n = 0; n <= mask_; n++) {
        const int32_t* p = index_ + size_t{i} * abi::IDX_BUCKET_INTS;
        if (p[2] == abi::IDX_EMPTY) break;
        if (p[0] == l && p[1] == h) return p[2];
        i = (i + 1) & mask_;
      }
    }
    if (old_ == nullptr) return -1;
    i = hash & oldMask_;
    for (uint32_t n = 0; n <= oldMask_; n++) {
      const int32_t* p = old_ + size_t{i} * abi::IDX_BUCKET_INTS;
      if (p[2] == abi::IDX_EMPTY) return -1;
      if (p[2] != abi::IDX_GONE && p[0] == l && p[1] == h) return p[2];
      i = (i + 1) & oldMask_;
    }
    return -1;
  }

  // Software prefetch kAhead keys ahead: a batch's probes and row reads are independent cache
  // misses (random keys over a table larger than the caches), so issuing them early overlaps
  // their DRAM latency. Hints only: no result depends on them.
  static constexpr int64_t kAhead = 16;

  // Hashes of a batch's keys, computed in one tight loop before the probes (and their
  // prefetches) use them.
  void HashAll(const uint32_t* k32, int64_t n) {
    hashes_.resize(n);
    kHashKeys(k32, n, salt_, hashes_.data());
  }

  // The prefetch helpers are always inlined: GCC 12's IPA mod/ref analysis judged them free
  // of side effects and deleted every call (-O2: the addon held no prefetch instruction, so
  // the prefetches this file relied on never ran); inlined, the builtins stay.
  __attribute__((always_inline)) static void PrefetchBucket(const IndexView& v, uint32_t hash) {
    if (v.useTags) __builtin_prefetch(v.tags + (hash & v.mask));
    const int32_t* p = v.index + size_t{hash & v.mask} * abi::IDX_BUCKET_INTS;
    __builtin_prefetch(p);
    __builtin_prefetch(p + 2);  // a 12-byte bucket may straddle two lines
  }

  // The first lines of a row (and of its state); the hardware prefetcher follows the rest.
  __attribute__((always_inline)) void PrefetchRow(int32_t s, bool state) const {
    if (s < 0 || !SlotOk(s)) return;
    const size_t r = static_cast<uint32_t>(s) & static_cast<uint32_t>(ChunkRows() - 1);
    const size_t elem = rowDtype_ == abi::ROW_F32 ? 4 : 2;
    const size_t bytes = static_cast<size_t>(dim_) * elem;
    const char* row = rowBytePtrs_[static_cast<uint32_t>(s) >> chunkShift_] + r * bytes;
    // A gather only reads the row; an update writes it.
    if (state) {
      for (size_t off = 0; off < bytes && off < 256; off += 64) __builtin_prefetch(row + off, 1);
    } else {
      for (size_t off = 0; off < bytes && off < 256; off += 64) __builtin_prefetch(row + off, 0);
    }
    if (state && stateDim_ > 0) {
      const Chunk& c = chunks_[static_cast<uint32_t>(s) >> chunkShift_];
      const char* st = reinterpret_cast<const char*>(c.state + r * stateDim_);
      const size_t sb = static_cast<size_t>(stateDim_) * 4;
      for (size_t off = 0; off < sb && off < 256; off += 64) __builtin_prefetch(st + off, 1);
    }
  }

  bool SlotOk(int32_t slot) const {
    return slot >= 0 && (static_cast<size_t>(slot) >> chunkShift_) < rowBytePtrs_.size();
  }

  // Whether a gather prefetches rows ahead of its copy: once the rows outgrow what a core's
  // caches keep (kRowPrefetchMinBytes), each row read is an L3 or DRAM miss the prefetch
  // overlaps (10^5–10^6 rows at dim 32: 1.1–1.7× the rate, measured); below that the rows
  // stay cached and the prefetches only cost instructions (10^4 rows: 2–3 % slower).
  bool PrefetchRows() const {
    const size_t elem = rowDtype_ == abi::ROW_F32 ? 4 : 2;
    return rowBytePtrs_.size() * static_cast<size_t>(ChunkRows()) * static_cast<size_t>(dim_) * elem >=
           kRowPrefetchMinBytes;
  }

  // Checks (typed array of type t, at least `need` elements) and returns its data. One
  // napi_get_typedarray_info call (type, length and data, byte offset applied): the wrapper's
  // TypedArrayType/ElementLength/ArrayBuffer/ByteOffset each make a call of their own, and
  // those dominated a small batch. A non-typed-array is napi_invalid_arg: not ok.
  template <typename T>
  static T* Arg(napi_env env, const Napi::Value& v, napi_typedarray_type t, int64_t need, bool* ok,
                int64_t* length = nullptr) {
    napi_typedarray_type type;
    size_t len = 0;
    void* data = nullptr;
    if (napi_get_typedarray_info(env, v, &type, &len, &data, nullptr, nullptr) != napi_ok || type != t ||
        static_cast<int64_t>(len) < need) {
      *ok = false;
      return nullptr;
    }
    if (length != nullptr) *length = static_cast<int64_t>(len);
    return static_cast<T*>(data);
  }

  // The batch size argument (info[1]); -1 when missing or out of range, or (probes) before
  // an index is registered.
  int64_t BatchN(const Napi::CallbackInfo& info, size_t argc, bool probes = true) const {
    if (info.Length() != argc || !info[1].IsNumber() || (probes && index_ == nullptr)) return -1;
    const double n = info[1].As<Napi::Number>().DoubleValue();
    if (!(n >= 0 && n <= (1 << 24)) || n != std::floor(n)) return -1;
    return static_cast<int64_t>(n);
  }

  // gather(k32: Uint32Array, n, out: Float32Array, miss: Int32Array, nowMs) → misses (their
  // request positions in miss[], their rows written as zeros — the init row of a zero-init
  // table, which then needs no second pass; the caller fills other init rows: keys without a
  // row, and in a TTL table rows whose last push is ttlMs old at nowMs), or a K_ error.
  Napi::Value Gather(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const int64_t n = BatchN(info, 5);
    bool ok = n >= 0 && info[4].IsNumber();
    const double nowMs = ok ? info[4].As<Napi::Number>().DoubleValue() : 0;
    const uint32_t* k32 = ok ? Arg<uint32_t>(env, info[0], napi_uint32_array, 2 * n, &ok) : nullptr;
    float* out = ok ? Arg<float>(env, info[2], napi_float32_array, n * dim_, &ok) : nullptr;
    int32_t* miss = ok ? Arg<int32_t>(env, info[3], napi_int32_array, n, &ok) : nullptr;
    if (!ok) return Napi::Number::New(env, abi::K_BAD_LENGTH);
    // Probe everything first, then copy, so independent cache misses overlap (and nothing is
    // written when the index names a slot beyond the chunks).
    // Rows are prefetched in the copy pass (CopyF32RowsBody), not while probing: issued
    // there, up to a batch ahead of their copy, they were 20 % slower at 10^4 rows and no
    // faster at 10^6 (measured).
    slots_.resize(n);
    if (ProbeAll(k32, n, slots_.data()) < 0) return Napi::Number::New(env, abi::K_BAD_SLOT);
    int32_t misses;
    // Plain f32 rows of the usual embedding dims copy with a constant size (inlined moves, no
    // memcpy call per row); fp16 and TTL tables take the general loop.
    if (rowDtype_ == abi::ROW_F32 && !hasTtl_) {
      switch (dim_) {
        case 8: misses = CopyF32<8>(n, out, miss); break;
        case 16: misses = CopyF32<16>(n, out, miss); break;
        case 32: misses = CopyF32<32>(n, out, miss); break;
        case 64: misses = CopyF32<64>(n, out, miss); break;
        case 128: misses = CopyF32<128>(n, out, miss); break;
        default: misses = CopyF32<0>(n, out, miss); break;
      }
    } else {
      misses = CopyRows(n, out, miss, nowMs);
    }
    return Napi::Number::New(env, misses);
  }

  // The copy pass of a gather over f32 rows without TTL: kDim, or dim_ when kDim is 0.
  template <int64_t kDim>
  int32_t CopyF32(int64_t n, float* out, int32_t* miss) const {
    const F32Rows r{rowsF32_.data(), slots_.data(), chunkShift_, static_cast<uint32_t>(ChunkRows() - 1),
                    kDim != 0 ? kDim : dim_, PrefetchRows()};
#if defined(RDMAJS_PS_AVX2)
    if constexpr (kDim != 0 && kDim % 16 == 0) {
      if (kAvx512 && reinterpret_cast<uintptr_t>(out) % 64 != 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0)
        return CopyF32RowsAvx512Stream<kDim>(r, n, out, miss);
    }
    if (kAvx512) return CopyF32RowsAvx512<kDim>(r, n, out, miss);
#endif
    return CopyF32Rows<kDim>(r, n, out, miss);
  }

  // The copy pass of a gather, any row type, TTL expiry included.
  int32_t CopyRows(int64_t n, float* out, int32_t* miss, double nowMs) const {
    const uint32_t cmask = static_cast<uint32_t>(ChunkRows() - 1);
    int32_t misses = 0;
    const size_t rowBytes = static_cast<size_t>(dim_) * 4;
    for (int64_t i = 0; i < n; i++) {
      const int32_t s = slots_[i];
      float* o = out + i * dim_;
      if (s < 0) {
        miss[misses++] = static_cast<int32_t>(i);
        std::memset(o, 0, rowBytes);
        continue;
      }
      const Chunk& c = chunks_[static_cast<uint32_t>(s) >> chunkShift_];
      const size_t ri = static_cast<uint32_t>(s) & cmask;
      // SparseTable's #expired, the same double operations.
      if (c.lastMs != nullptr && nowMs - c.lastMs[ri] >= ttl_) {
        miss[misses++] = static_cast<int32_t>(i);
        std::memset(o, 0, rowBytes);
        continue;
      }
      const size_t r = ri * dim_;
      if (c.f32 != nullptr) {
        std::memcpy(o, c.f32 + r, rowBytes);
      } else {
        const uint16_t* h = c.f16 + r;
        for (int64_t j = 0; j < dim_; j++) o[j] = HalfToFloat(h[j]);
      }
    }
    return misses;
  }

  // lookup(k32, n, slots: Int32Array) → number of keys without a row (slot -1).
  Napi::Value Lookup(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const int64_t n = BatchN(info, 3);
    bool ok = n >= 0;
    const uint32_t* k32 = ok ? Arg<uint32_t>(env, info[0], napi_uint32_array, 2 * n, &ok) : nullptr;
    int32_t* slots = ok ? Arg<int32_t>(env, info[2], napi_int32_array, n, &ok) : nullptr;
    if (!ok) return Napi::Number::New(env, abi::K_BAD_LENGTH);
    return Napi::Number::New(env, ProbeAll(k32, n, slots));
  }

  // apply(slots: Int32Array, n, grads: Float32Array, uniq: Int32Array, scalars) → rows
  // updated. slots[i] < 0 drops key i. Duplicate slots are summed in request order, then each
  // distinct row (first-occurrence order, written to uniq[]) gets one update. scalars: null,
  // or (Adam) a Float32Array of OPT_ADAM_STEP_SCALARS per key, read at a row's first key.
  Napi::Value Apply(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const int64_t n = BatchN(info, 5);
    bool ok = n >= 0;
    const int32_t* slots = ok ? Arg<int32_t>(env, info[0], napi_int32_array, n, &ok) : nullptr;
    const float* grads = ok ? Arg<float>(env, info[2], napi_float32_array, n * dim_, &ok) : nullptr;
    int32_t* uniq = ok ? Arg<int32_t>(env, info[3], napi_int32_array, n, &ok) : nullptr;
    const float* scalars = nullptr;
    if (ok && scalarsPerKey_ > 0)
      scalars = Arg<float>(env, info[4], napi_float32_array, n * scalarsPerKey_, &ok);
    else if (ok && !info[4].IsNull())
      ok = false;
    if (!ok) return Napi::Number::New(env, abi::K_BAD_LENGTH);
    for (int64_t i = 0; i < n; i++)
      if (slots[i] >= 0 && !SlotOk(slots[i])) return Napi::Number::New(env, abi::K_BAD_SLOT);
    size_t m = 64;
    while (m < 2 * static_cast<size_t>(n)) m *= 2;
    mapSlot_.assign(m, -1);
    mapIdx_.resize(m);
    src_.resize(n);
    first_.resize(n);
    if (acc_.size() < static_cast<size_t>(n * dim_)) acc_.resize(n * dim_);
    const size_t mmask = m - 1;
    int32_t u = 0;
    for (int64_t i = 0; i < n; i++) {
      const int32_t slot = slots[i];
      if (slot < 0) continue;
      size_t h = (static_cast<uint32_t>(slot) * 0x9e3779b1u) & mmask;
      while (mapSlot_[h] != -1 && mapSlot_[h] != slot) h = (h + 1) & mmask;
      const float* g = grads + i * dim_;
      if (mapSlot_[h] == -1) {
        mapSlot_[h] = slot;
        mapIdx_[h] = u;
        uniq[u] = slot;
        src_[u] = i;
        first_[u] = i;
        u++;
      } else {
        const int32_t k = mapIdx_[h];
        float* a = acc_.data() + static_cast<size_t>(k) * dim_;
        if (src_[k] >= 0) {
          std::memcpy(a, grads + src_[k] * dim_, static_cast<size_t>(dim_) * 4);
          src_[k] = -1;
        }
        for (int64_t j = 0; j < dim_; j++) a[j] = a[j] + g[j];
      }
    }
    for (int32_t k = 0; k < u; k++) {
      if (k + kAhead < u) PrefetchRow(uniq[k + kAhead], true);
      const float* g = src_[k] >= 0 ? grads + src_[k] * dim_ : acc_.data() + static_cast<size_t>(k) * dim_;
      UpdateSlot(static_cast<uint32_t>(uniq[k]), g, scalars != nullptr ? scalars + first_[k] * scalarsPerKey_ : nullptr);
    }
    return Napi::Number::New(env, u);
  }

  // update(uniq: Int32Array, u, src: Int32Array, grads: Float32Array, acc: Float32Array,
  // scalars) → u: the JS push's own dedupe (uniq[k] a distinct slot; src[k] the element offset
  // of its only gradient in grads, or -1: its sum is acc[k·dim …]) and the optimizer update
  // of each row here. For the pushes whose admission, eviction and LRU order JS does (budgeted
  // and TTL tables, snapshots running). scalars: null, or (Adam) OPT_ADAM_STEP_SCALARS per row.
  Napi::Value UpdateRows(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const int64_t u = BatchN(info, 6, false);
    bool ok = u >= 0;
    const int32_t* uniq = ok ? Arg<int32_t>(env, info[0], napi_int32_array, u, &ok) : nullptr;
    const int32_t* src = ok ? Arg<int32_t>(env, info[2], napi_int32_array, u, &ok) : nullptr;
    int64_t gLen = 0, aLen = 0;
    const float* grads = ok ? Arg<float>(env, info[3], napi_float32_array, 0, &ok, &gLen) : nullptr;
    const float* acc = ok ? Arg<float>(env, info[4], napi_float32_array, 0, &ok, &aLen) : nullptr;
    const float* scalars = nullptr;
    if (ok && scalarsPerKey_ > 0)
      scalars = Arg<float>(env, info[5], napi_float32_array, u * scalarsPerKey_, &ok);
    else if (ok && !info[5].IsNull())
      ok = false;
    if (!ok) return Napi::Number::New(env, abi::K_BAD_LENGTH);
    // Every offset checked before anything is written.
    for (int64_t k = 0; k < u; k++) {
      if (!SlotOk(uniq[k])) return Napi::Number::New(env, abi::K_BAD_SLOT);
      if (src[k] >= 0 ? int64_t{src[k]} + dim_ > gLen : (k + 1) * dim_ > aLen)
        return Napi::Number::New(env, abi::K_BAD_LENGTH);
    }
    for (int64_t k = 0; k < u; k++) {
      if (k + kAhead < u) PrefetchRow(uniq[k + kAhead], true);
      const float* g = src[k] >= 0 ? grads + src[k] : acc + k * dim_;
      UpdateSlot(static_cast<uint32_t>(uniq[k]), g, scalars != nullptr ? scalars + k * scalarsPerKey_ : nullptr);
    }
    return Napi::Number::New(env, static_cast<double>(u));
  }

  // One distinct row's update, in the widest vectors the CPU has (chosen at load): the
  // optimizer loops are element-wise IEEE + - * / sqrt (no contraction, no reassociation), so
  // every width computes the same bits; the scalar baseline build made a push's update its
  // largest cost (≈ 14 µs of a shard's ≈ 85 per 85-row Adagrad sub-push, measured).
  void UpdateSlot(uint32_t slot, const float* g, const float* sc) {
#if defined(RDMAJS_PS_AVX2)
    if (kAvx512) return UpdateSlotAvx512(slot, g, sc);
    if (kAvx2) return UpdateSlotAvx2(slot, g, sc);
#endif
    UpdateSlotBody(slot, g, sc);
  }

#if defined(RDMAJS_PS_AVX2)
  __attribute__((target("avx512f"))) void UpdateSlotAvx512(uint32_t slot, const float* g, const float* sc) {
    UpdateSlotBody(slot, g, sc);
  }

  __attribute__((target("avx2"))) void UpdateSlotAvx2(uint32_t slot, const float* g, const float* sc) {
    UpdateSlotBody(slot, g, sc);
  }
#endif

  // A slot's update, inside its seqlock in a one-sided readable table. Inlined into each
  // UpdateSlot* so the loops are compiled for that one's vectors.
  __attribute__((always_inline)) void UpdateSlotBody(uint32_t slot, const float* g, const float* sc) {
    Chunk& c = chunks_[slot >> chunkShift_];
    const size_t i = slot & static_cast<uint32_t>(ChunkRows() - 1);
    uint32_t* seq = c.meta != nullptr ? c.meta + i * abi::VIEW_META_INTS : nullptr;
    if (seq != nullptr) SeqBegin(seq);
    UpdateRow(c, i, g, sc);
    if (seq != nullptr) SeqEnd(seq);
  }

  // Its step count advanced, then the update (fp16 rows widened and rounded back around it).
  __attribute__((always_inline)) void UpdateRow(Chunk& c, size_t i, const float* g, const float* sc) {
    uint32_t step = 0;
    if (c.steps != nullptr) step = ++c.steps[i];
    float* s = c.state + i * stateDim_;
    if (c.f32 != nullptr) {
      float* w = c.f32 + i * dim_;
      Remember(w, s);
      Update(w, s, g, step, sc);
      Saturate(w, s, kF32Max);
    } else {
      uint16_t* h = c.f16 + i * dim_;
      float* w = tmp_.data();
      for (int64_t j = 0; j < dim_; j++) w[j] = HalfToFloat(h[j]);
      Remember(w, s);
      Update(w, s, g, step, sc);
      Saturate(w, s, kF16Max);
      for (int64_t j = 0; j < dim_; j++) h[j] = FloatToHalf(w[j]);
    }
  }

  // Saturating tables (see src/internal/saturate.ts, the same rule in JS): a row's weights
  // and state before its update, so an element whose update is undefined (NaN) keeps its value.
  __attribute__((always_inline)) void Remember(const float* w, const float* s) {
    if (!saturate_) return;
    std::memcpy(before_.data(), w, static_cast<size_t>(dim_) * 4);
    // An optimizer without state (SGD) has no state memory: s is null, and memcpy from null
    // is undefined even for 0 bytes.
    if (stateDim_ > 0) std::memcpy(before_.data() + dim_, s, static_cast<size_t>(stateDim_) * 4);
  }

  // An element beyond ±limit (±Inf included) is held at ±limit; a NaN takes its old value. The
  // common all-finite row costs one branch-free pass.
  __attribute__((always_inline)) void Saturate(float* w, float* s, float limit) {
    if (!saturate_) return;
    if (!InRange(w, dim_, limit)) Clamp(w, before_.data(), dim_, limit);
    if (stateDim_ > 0 && !InRange(s, stateDim_, kF32Max)) Clamp(s, before_.data() + dim_, stateDim_, kF32Max);
  }

  __attribute__((always_inline)) static bool InRange(const float* x, int64_t n, float limit) {
    int bad = 0;
    for (int64_t j = 0; j < n; j++) bad |= !(std::fabs(x[j]) <= limit);
    return bad == 0;
  }

  __attribute__((always_inline)) static void Clamp(float* x, const float* old, int64_t n, float limit) {
    for (int64_t j = 0; j < n; j++) {
      const float v = x[j];
      if (!(std::fabs(v) <= limit)) x[j] = std::isnan(v) ? old[j] : (v > 0 ? limit : -limit);
    }
  }

  // One row's update: the formulas of src/Optimizer.ts in the same operation order.
  // Rows, their state and the gradients never overlap (restrict: the loops vectorize without
  // run-time overlap checks).
  __attribute__((always_inline)) void Update(float* __restrict w, float* __restrict s, const float* __restrict g,
                                             uint32_t step, const float* sc) const {
    const int64_t dim = dim_;
    const double* p = params_.data();
    switch (kind_) {
      case abi::OPT_SGD: {
        const float lr = static_cast<float>(p[0]), wd = static_cast<float>(p[1]);
        for (int64_t j = 0; j < dim; j++) {
          const float wj = w[j];
          float gj = g[j];
          if (wd != 0.0f) gj = gj + wd * wj;
          w[j] = wj - lr * gj;
        }
        break;
      }
      case abi::OPT_SGD_MOMENTUM: {
        const float lr = static_cast<float>(p[0]), mu = static_cast<float>(p[1]), damp1 = static_cast<float>(p[2]),
                    wd = static_cast<float>(p[3]);
        const bool nesterov = p[4] != 0;
        for (int64_t j = 0; j < dim; j++) {
          const float wj = w[j];
          float gj = g[j];
          if (wd != 0.0f) gj = gj + wd * wj;
          const float b = step > 1 ? mu * s[j] + damp1 * gj : gj;
          s[j] = b;
          gj = nesterov ? gj + mu * b : b;
          w[j] = wj - lr * gj;
        }
        break;
      }
      case abi::OPT_ADAGRAD: {
        // lr and lrDecay stay double: the JS computes the step's lr in double, then rounds.
        const double lr = p[0], lrDecay = p[1];
        const float wd = static_cast<float>(p[2]), eps = static_cast<float>(p[3]);
        const float clr = static_cast<float>(lr / (1 + (static_cast<double>(step) - 1) * lrDecay));
        for (int64_t j = 0; j < dim; j++) {
          const float wj = w[j];
          float gj = g[j];
          if (wd != 0.0f) gj = gj + wd * wj;
          const float sum = s[j] + gj * gj;
          s[j] = sum;
          const float stdv = std::sqrt(sum) + eps;
          w[j] = wj - (clr * gj) / stdv;
        }
        break;
      }
      case abi::OPT_FTRL: {
        const float af = static_cast<float>(p[0]), bf = static_cast<float>(p[1]), l1 = static_cast<float>(p[2]),
                    l2 = static_cast<float>(p[3]);
        float* z = s;
        float* nn = s + dim;
        for (int64_t j = 0; j < dim; j++) {
          const float gj = g[j];
          const float n0 = nn[j];
          const float nNew = n0 + gj * gj;
          const float sigma = (std::sqrt(nNew) - std::sqrt(n0)) / af;
          const float zj = (z[j] + gj) - sigma * w[j];
          z[j] = zj;
          nn[j] = nNew;
          if (std::fabs(zj) <= l1) {
            w[j] = 0.0f;
          } else {
            const float zs = zj > 0 ? zj - l1 : zj + l1;
            w[j] = -zs / ((bf + std::sqrt(nNew)) / af + l2);
          }
        }
        break;
      }
      case abi::OPT_ADAM:
      case abi::OPT_ADAMW: {
        const float b1 = static_cast<float>(p[0]), b2 = static_cast<float>(p[1]), c1 = static_cast<float>(p[2]),
                    c2 = static_cast<float>(p[3]), eps = static_cast<float>(p[4]), wdf = static_cast<float>(p[5]),
                    decay = static_cast<float>(p[6]);
        const bool wdOn = p[7] != 0, decoupled = kind_ == abi::OPT_ADAMW;
        const float stepSize = sc[0], bc2Sqrt = sc[1];
        float* mm = s;
        float* vv = s + dim;
        for (int64_t j = 0; j < dim; j++) {
          float wj = w[j];
          float gj = g[j];
          if (decoupled) {
            if (wdOn) wj = wj * decay;
          } else if (wdOn) {
            gj = gj + wdf * wj;
          }
          const float m = b1 * mm[j] + c1 * gj;
          const float v = b2 * vv[j] + (c2 * gj) * gj;
          mm[j] = m;
          vv[j] = v;
          const float denom = std::sqrt(v) / bc2Sqrt + eps;
          w[j] = wj - (stepSize * m) / denom;
        }
        break;
      }
      case abi::OPT_SUM:
        for (int64_t j = 0; j < dim; j++) w[j] = w[j] + g[j];
        break;
      case abi::OPT_ASSIGN:
        std::memcpy(w, g, static_cast<size_t>(dim) * 4);
        break;
      default:
        break;
    }
  }

  int64_t dim_ = 0, stateDim_ = 0;
  int rowDtype_ = 0, chunkShift_ = 0, kind_ = 0, scalarsPerKey_ = 0;
  bool usesSteps_ = false, hasTtl_ = false, saturate_ = false;
  static constexpr float kF32Max = std::numeric_limits<float>::max();
  // The largest finite half: f16 rows saturate here, before rounding (65520 and up round to ∞).
  static constexpr float kF16Max = 65504.0f;
  double ttl_ = 0;
  std::vector<double> params_;
  std::vector<Chunk> chunks_;
  // Each chunk's row data, flat (the hot loops index these, not the larger Chunk records).
  std::vector<float*> rowsF32_;
  std::vector<const char*> rowBytePtrs_;
  Napi::Reference<Napi::TypedArray> indexRef_, tagsRef_, oldRef_;
  const int32_t* index_ = nullptr;
  const uint8_t* tags_ = nullptr;
  // Tags pay where the index is cache-resident (a probe's mispredicted branches dominate);
  // beyond that each probe's extra tag line costs more than the branches (10^7 rows: ~25 %
  // slower with tags, measured — on a build whose tag prefetches the compiler had deleted;
  // not measured since), so larger tables probe bucket by bucket as before.
  static constexpr uint32_t kTagProbeMaxBuckets = uint32_t{1} << 21;
  static constexpr size_t kRowPrefetchMinBytes = size_t{4} << 20;
  bool useTags_ = true;
  const int32_t* old_ = nullptr;
  uint32_t mask_ = 0, oldMask_ = 0, salt_ = 0;
  // Per-batch scratch, reused.
  std::vector<int32_t> slots_, mapSlot_, mapIdx_;
  std::vector<uint32_t> hashes_;
  std::vector<int64_t> src_, first_;
  std::vector<float> acc_, tmp_, before_;
};

// adviseHugePages(view) → whether madvise(MADV_HUGEPAGE) was applied to the 2 MiB-aligned
// interior of the view's memory. Called on fresh (unwritten) large arrays, so their first
// writes fault in huge pages: random probes of a big index then miss the TLB far less. Only
// a hint (THP may be off, or the range too small); it changes no contents.
Napi::Value AdviseHugePages(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsTypedArray()) {
    Napi::TypeError::New(env, "adviseHugePages(typedArray)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  auto a = info[0].As<Napi::TypedArray>();
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t start = reinterpret_cast<uintptr_t>(DataOf<uint8_t>(a));
  const uintptr_t lo = (start + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (start + a.ByteLength()) & ~(kHuge - 1);
  if (hi > lo && madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE) == 0)
    return Napi::Boolean::New(env, true);
#endif
  return Napi::Boolean::New(env, false);
}

// bytesToAlign(view) → bytes from the view's first byte to its first ROW_ALIGN-aligned one
// (JS cannot see addresses): where SparseTable starts a slab's rows.
Napi::Value BytesToAlign(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsTypedArray()) {
    Napi::TypeError::New(env, "bytesToAlign(typedArray)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(DataOf<uint8_t>(info[0].As<Napi::TypedArray>()));
  constexpr uintptr_t kAlign = abi::ROW_ALIGN;
  return Napi::Number::New(env, static_cast<double>((kAlign - a % kAlign) % kAlign));
}

bool IsF32(const Napi::Value& v) {
  return v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_float32_array;
}

// firstNonFinite(f: Float32Array) → index of its first NaN or ±Inf element, or -1: the
// network layer's check of an untrusted push before anything is applied. Exponent bits all
// ones is non-finite; 64 floats are tested per branch.
Napi::Value FirstNonFinite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !IsF32(info[0])) {
    Napi::TypeError::New(env, "firstNonFinite(float32Array)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto a = info[0].As<Napi::TypedArray>();
  const size_t n = a.ElementLength();
  const uint8_t* bytes = DataOf<uint8_t>(a);
  constexpr uint32_t kExp = 0x7f800000u;
  constexpr size_t kBlock = 64;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint32_t block[kBlock];
    std::memcpy(block, bytes + i * 4, sizeof block);  // the view need not be 4-aligned
    uint32_t bad = 0;
    for (size_t j = 0; j < kBlock; j++) bad |= (block[j] & kExp) == kExp;
    if (bad != 0) break;
  }
  for (; i < n; i++) {
    uint32_t b;
    std::memcpy(&b, bytes + i * 4, 4);
    if ((b & kExp) == kExp) return Napi::Number::New(env, static_cast<double>(i));
  }
  return Napi::Number::New(env, -1);
}

// crc32c(bytes: Uint8Array, start, end, crc) → CRC-32C of bytes[start, end) continuing crc:
// push-log records and snapshot tensors. JS checked the range; it is checked again here.
Napi::Value Crc32cRange(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 4 || !info[0].IsTypedArray() ||
      info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    Napi::TypeError::New(env, "crc32c(uint8Array, start, end, crc)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto a = info[0].As<Napi::TypedArray>();
  const double start = info[1].As<Napi::Number>().DoubleValue();
  const double end = info[2].As<Napi::Number>().DoubleValue();
  const uint32_t crc = info[3].As<Napi::Number>().Uint32Value();
  if (!(start >= 0 && start <= end && end <= static_cast<double>(a.ElementLength()))) {
    Napi::RangeError::New(env, "crc32c: range outside the array").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const uint8_t* p = DataOf<uint8_t>(a) + static_cast<size_t>(start);
  const size_t n = static_cast<size_t>(end) - static_cast<size_t>(start);
  return Napi::Number::New(env, rdmajs_ps::Crc32c(p, n, crc));
}

Napi::Value AbiTable(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  for (const auto& e : abi::kTable) o.Set(e.name, e.value);
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("abi", Napi::Function::New(env, AbiTable));
  exports.Set("TableKernels", TableKernels::Define(env));
  exports.Set("adviseHugePages", Napi::Function::New(env, AdviseHugePages));
  exports.Set("bytesToAlign", Napi::Function::New(env, BytesToAlign));
  exports.Set("firstNonFinite", Napi::Function::New(env, FirstNonFinite));
  exports.Set("crc32c", Napi::Function::New(env, Crc32cRange));
  return exports;
}

}  // namespace

NODE_API_MODULE(rdmajs_ps_kernels, Init)

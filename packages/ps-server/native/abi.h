// The one contract between the kernels addon and its TypeScript side (src/internal/abi.ts
// mirrors it). The addon exports this table (`abi()`) and the loader compares it field by
// field, so a stale build is ERR_PS_NATIVE_LOAD naming the field, never silent misbehaviour.
#pragma once

namespace rdmajs_ps::abi {

// Bumped whenever anything below changes meaning.
constexpr int kVersion = 9;

// Update kernels (each takes its float32/double parameters in a fixed order, see kernels.cc).
constexpr int OPT_SGD = 0, OPT_SGD_MOMENTUM = 1, OPT_ADAGRAD = 2, OPT_FTRL = 3, OPT_SUM = 4, OPT_ASSIGN = 5,
              OPT_ADAM = 6, OPT_ADAMW = 7;
// Parameters per kernel.
constexpr int OPT_SGD_PARAMS = 2, OPT_SGD_MOMENTUM_PARAMS = 5, OPT_ADAGRAD_PARAMS = 4, OPT_FTRL_PARAMS = 4,
              OPT_ADAM_PARAMS = 8;
// Float32 scalars per key that JS computes for kernels whose step scalars need V8's `**`
// (Adam/AdamW: step size and √(1−β2^t)), passed to apply() beside the gradients.
constexpr int OPT_ADAM_STEP_SCALARS = 2;

// Row storage. Each chunk's rows start ROW_ALIGN-aligned in their slab (bytesToAlign()), so
// a row of a multiple of 64 bytes spans no more cache lines than it must.
constexpr int ROW_F32 = 0, ROW_F16 = 1, ROW_ALIGN = 64;

// Hash index bucket marks (HashIndex.ts): empty, and moved/deleted in the old table.
constexpr int IDX_EMPTY = -1, IDX_GONE = -2;
// Hash index tags (HashIndex.ts tagOf): one byte per bucket of the live table, the empty
// bucket's tag, and the tag bytes mirrored past the last bucket (a 16-tag group load from any
// bucket stays inside the array).
constexpr int IDX_TAG_EMPTY = 0, IDX_TAG_PAD = 16;
// Hash index bucket: int32 words key lo, key hi, slot (@rdmajs/ps-wire STORE_VIEW.BUCKET_BYTES / 4).
constexpr int IDX_BUCKET_INTS = 3;

// One-sided readable tables: u32 words per slot meta record in the store view (seq first),
// @rdmajs/ps-wire STORE_VIEW.META_BYTES / 4.
constexpr int VIEW_META_INTS = 4;

// Kernel results below zero: a length/offset that does not fit, or an index slot beyond
// the registered chunks. Nothing was written.
constexpr int K_BAD_LENGTH = -1, K_BAD_SLOT = -2;

struct Entry {
  const char* name;
  int value;
};

constexpr Entry kTable[] = {
    {"version", kVersion},
    {"ROW_ALIGN", ROW_ALIGN},
    {"OPT_SGD", OPT_SGD},
    {"OPT_SGD_MOMENTUM", OPT_SGD_MOMENTUM},
    {"OPT_ADAGRAD", OPT_ADAGRAD},
    {"OPT_FTRL", OPT_FTRL},
    {"OPT_SUM", OPT_SUM},
    {"OPT_ASSIGN", OPT_ASSIGN},
    {"OPT_ADAM", OPT_ADAM},
    {"OPT_ADAMW", OPT_ADAMW},
    {"OPT_SGD_PARAMS", OPT_SGD_PARAMS},
    {"OPT_SGD_MOMENTUM_PARAMS", OPT_SGD_MOMENTUM_PARAMS},
    {"OPT_ADAGRAD_PARAMS", OPT_ADAGRAD_PARAMS},
    {"OPT_FTRL_PARAMS", OPT_FTRL_PARAMS},
    {"OPT_ADAM_PARAMS", OPT_ADAM_PARAMS},
    {"OPT_ADAM_STEP_SCALARS", OPT_ADAM_STEP_SCALARS},
    {"ROW_F32", ROW_F32},
    {"ROW_F16", ROW_F16},
    {"IDX_EMPTY", IDX_EMPTY},
    {"IDX_GONE", IDX_GONE},
    {"IDX_TAG_EMPTY", IDX_TAG_EMPTY},
    {"IDX_TAG_PAD", IDX_TAG_PAD},
    {"IDX_BUCKET_INTS", IDX_BUCKET_INTS},
    {"K_BAD_LENGTH", K_BAD_LENGTH},
    {"K_BAD_SLOT", K_BAD_SLOT},
    {"VIEW_META_INTS", VIEW_META_INTS},
};

}  // namespace rdmajs_ps::abi

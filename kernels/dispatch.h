// Helpers for the per-op dispatch functions in kernels/<op>.cpp: each checks its arguments once,
// then calls cpu:: or cuda:: by the device of its tensors.
#pragma once
#include <initializer_list>
#include <span>

#include "core/tensor.h"

namespace fathom {

// All defined tensors on one device; returns it.
Device common_device(const char* op, std::span<const Tensor* const> tensors);
inline Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  return common_device(op, std::span<const Tensor* const>(tensors.begin(), tensors.size()));
}
// The dtype per-row statistics (RMSNorm's rstd, cross-entropy's lse) and losses are kept in for
// inputs of dtype t: F64 for F64, else F32 (BF16 activations keep F32 statistics).
inline DType stats_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
// For ops whose CUDA kernel is not in this build.
[[noreturn]] void no_cuda_kernel(const char* op);

// Runs f<T>() with T = float or double for a floating CPU tensor.
template <typename F>
void dispatch_float(const char* op, DType dtype, F&& f) {
  if (dtype == DType::f32) return f.template operator()<float>();
  if (dtype == DType::f64) return f.template operator()<double>();
  FATHOM_FAIL(op, ": the CPU reference computes in F32 or F64, got ", dtype_name(dtype));
}

// Runs f<I>() with I = int32_t or int64_t for an integer index tensor (token ids, targets, positions).
template <typename F>
void dispatch_index(const char* op, const char* what, DType dtype, F&& f) {
  if (dtype == DType::i32) return f.template operator()<int32_t>();
  if (dtype == DType::i64) return f.template operator()<int64_t>();
  FATHOM_FAIL(op, ": ", what, " must be I32 or I64, got ", dtype_name(dtype));
}

}  // namespace fathom

// RMSNorm's per-element arithmetic and its 1 / rms, shared by the norm kernels (rms_norm.cu) and the skinny
// GEMM that begins with a block's residual step (skinny_matmul.cu): one definition, so that both round
// alike and a value computed in either is the same bits.
#pragma once

#include "kernels/runtime/device_math.cuh"

namespace fathom::cuda::rms {

// 1 / sqrt(mean square + eps) of a row of n elements whose squares sum to ss.
__device__ __forceinline__ float rstd(float ss, int64_t n, float eps) { return 1.0f / sqrtf(ss / float(n) + eps); }

// add + x rstd w, rounded once: rms_norm's output (add 0) or the post-norm residual step's (add the residual).
template <typename T>
__device__ __forceinline__ T residual_normed(float add, T x, float rstd, T w) {
  return from_float<T>(add + to_float(x) * rstd * to_float(w));
}

// residual + x, rounded as add rounds it: the pre-norm residual step's sum.
template <typename T>
__device__ __forceinline__ T rounded_sum(T residual, T x) {
  return from_float<T>(to_float(residual) + to_float(x));
}

// s rstd w, rounded: the pre-norm step's normalised sum.
template <typename T>
__device__ __forceinline__ T normed(T s, float rstd, T w) {
  return from_float<T>(to_float(s) * rstd * to_float(w));
}

}  // namespace fathom::cuda::rms

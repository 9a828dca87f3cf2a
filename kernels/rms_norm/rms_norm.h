// RMSNorm over the last dimension: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
#pragma once
#include <optional>

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

struct RmsNormOutput {
  Tensor y;     // like x
  Tensor rstd;  // [rows] (rows = numel / last dim), stats_dtype(x): F32 for F32/BF16 x, F64 for F64
};
struct RmsNormGrads {
  Tensor dx;       // like x
  Tensor dweight;  // like weight, or of the dtype rms_norm_backward was asked for
};

// x [..., n], weight [n] of x's dtype, eps > 0. The CPU accumulates in double; CUDA takes F32 or BF16
// with f32 statistics. Full-width and per-head norms are the same call (per-head: x [..., H, d], weight [d]).
// A defined `residual` (x's shape, dtype and device) is added in the same pass: y = residual + norm(x),
// the post-norm block's h = x + norm(sublayer(x)) without a separate add over the activations. The
// backward is the same (the residual's gradient is grad_y itself).
RmsNormOutput rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& residual = Tensor());
// The pre-norm block's residual step in one pass: sum = residual + x (rounded to x's dtype, as add rounds
// it) and y = norm(sum) with rstd, the same values as add then rms_norm_forward, reading the activations
// once. No backward of its own: where gradients are recorded the two ops run (autograd/ops.h add_rms_norm).
struct AddRmsNormOutput {
  Tensor sum;  // residual + x
  RmsNormOutput normed;
};
AddRmsNormOutput add_rms_norm_forward(const Tensor& residual, const Tensor& x, const Tensor& weight, double eps);
// Whether add_rms_norm takes that one pass (fused) or add then rms_norm (separate) where nothing records a
// gradient: FATHOM_ADD_RMS_NORM=fused|separate, read at the first call; unset, fused (its GPU tests passed;
// bench/results/2026-12-05_decode_defaults_h100.md).
Fusion add_rms_norm_choice();
void set_add_rms_norm_choice(Fusion choice);
// The rows fused takes the one pass at: one (a batch-1 decoding step; the residual step inside a GEMM launch repeats
// its sums there, skinny_matmul.h), or at least kAddRmsNormOnePassMinRows. Between, add then rms_norm: the one pass
// runs a block a row, and at 8 rows of 2048 (the Llama-3.2-1B shape decoding a batch of 8 on an H100) it made a step
// 2.1-2.4% slower than the add and the norm's launch (bench/results/2026-12-07_pre_norm_hand_on_h100.md; other
// counts below the bound follow unmeasured). The bound is about one row an SM.
constexpr int64_t kAddRmsNormOnePassMinRows = 128;
bool add_rms_norm_takes_one_pass(int64_t rows);
// dweight_dtype: the weight gradient's dtype, the weight's when absent. F32 for a BF16 weight is mixed
// precision's fp32 weight gradient (summed in f32 either way; CUDA only, like every BF16 input).
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               std::optional<DType> dweight_dtype = std::nullopt);

// The backends' entry points. dweight_dtype is the weight's dtype or, for a BF16 weight, F32 (CUDA only:
// the CPU takes no BF16, so its weight gradient is always of the weight's dtype).
using RmsNormForwardKernel = RmsNormOutput(const Tensor& x, const Tensor& weight, double eps, const Tensor& residual);
using RmsNormBackwardKernel = RmsNormGrads(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                                           const Tensor& rstd, DType dweight_dtype);
using AddRmsNormForwardKernel = AddRmsNormOutput(const Tensor& residual, const Tensor& x, const Tensor& weight,
                                                 double eps);
FATHOM_BACKENDS(RmsNormForwardKernel, rms_norm_forward)
FATHOM_BACKENDS(AddRmsNormForwardKernel, add_rms_norm_forward)
FATHOM_BACKENDS(RmsNormBackwardKernel, rms_norm_backward)

}  // namespace fathom

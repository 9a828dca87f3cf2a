// AdamW update over flat buffers (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
// Parameters without decay (embeddings, norms) are updated by a second call over their sub-range
// with weight_decay = 0.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

struct AdamWStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based count of updates including this one, for the bias corrections
  // Every gradient is multiplied by this first: global-norm clipping's coefficient, applied in the
  // update's own pass instead of a separate pass over the gradients.
  double grad_scale = 1.0;
};

// For every element, with g = grad_scale * the gradient:
//   p -= lr * weight_decay * p
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps)
// param, grad, m, v: same element count and floating dtype (F32 master weights; F64 for tests).
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& config);

// Elements [begin, end) of the flat buffers, updated with this weight decay.
struct AdamWRange {
  int64_t begin = 0;
  int64_t end = 0;
  double weight_decay = 0.0;
};
// The whole arena in one fused pass (one launch on CUDA): every range is updated as adamw_update
// would with config.weight_decay replaced by the range's; ranges ascend and do not overlap, and
// elements outside them are left alone. When compute_copy is given (F32, BF16 or F16, param's element
// count), it receives the updated parameters of the ranges converted to its dtype in the same pass:
// the bf16 compute weights of mixed-precision training.
void adamw_update_ranges(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const std::vector<AdamWRange>& ranges,
                         const AdamWStep& config, Tensor* compute_copy = nullptr);

// The backends' entry points (CUDA: F32 buffers; one update is a single range, one launch).
using AdamWUpdateKernel = void(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& config);
using AdamWUpdateRangesKernel = void(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                                     const std::vector<AdamWRange>& ranges, const AdamWStep& config,
                                     Tensor* compute_copy);
FATHOM_BACKENDS(AdamWUpdateKernel, adamw_update)
FATHOM_BACKENDS(AdamWUpdateRangesKernel, adamw_update_ranges)

}  // namespace fathom

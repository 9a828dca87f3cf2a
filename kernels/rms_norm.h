// RMSNorm over the last dimension: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
#pragma once
#include "core/tensor.h"

namespace fathom {

struct RmsNormOutput {
  Tensor y;     // like x
  Tensor rstd;  // [rows] (rows = numel / last dim), x's dtype, computed from a double accumulation
};
struct RmsNormGrads {
  Tensor dx;       // like x
  Tensor dweight;  // like weight
};

// x [..., n], weight [n], eps > 0.
RmsNormOutput rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd);

namespace cpu {
RmsNormOutput rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd);
}  // namespace cpu

}  // namespace fathom

// SwiGLU gating: y = silu(gate) * up, silu(g) = g * sigmoid(g), elementwise; and SiLU alone (the MoD
// predictor's activation).
#pragma once
#include "core/tensor.h"

namespace fathom {

struct SwigluGrads {
  Tensor dgate;
  Tensor dup;
};

// gate and up: same shape and floating dtype.
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up);
// y = silu(x); dx = grad_y * d silu(x)/dx. Floating x; grad_y like x.
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& grad_y, const Tensor& x);

namespace cpu {
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up);
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& grad_y, const Tensor& x);
}  // namespace cpu

namespace cuda {
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up);
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& grad_y, const Tensor& x);
}  // namespace cuda

}  // namespace fathom

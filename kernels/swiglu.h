// SwiGLU gating: y = silu(gate) * up, silu(g) = g * sigmoid(g), elementwise.
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

namespace cpu {
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up);
}  // namespace cpu

namespace cuda {
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up);
}  // namespace cuda

}  // namespace fathom

// SwiGLU gating: y = silu(gate) * up, silu(g) = g * sigmoid(g), elementwise; and SiLU alone (the MoD
// predictor's activation).
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

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

// The backends' entry points, one per op above.
using SwigluForwardKernel = Tensor(const Tensor& gate, const Tensor& up);
using SwigluBackwardKernel = SwigluGrads(const Tensor& grad_y, const Tensor& gate, const Tensor& up);
using SiluForwardKernel = Tensor(const Tensor& x);
using SiluBackwardKernel = Tensor(const Tensor& grad_y, const Tensor& x);
FATHOM_BACKENDS(SwigluForwardKernel, swiglu_forward)
FATHOM_BACKENDS(SwigluBackwardKernel, swiglu_backward)
FATHOM_BACKENDS(SiluForwardKernel, silu_forward)
FATHOM_BACKENDS(SiluBackwardKernel, silu_backward)

}  // namespace fathom

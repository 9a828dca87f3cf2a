// Global gradient-norm clipping over the flat gradient arena. The clip itself is a coefficient that
// the optimizer applies as it reads the gradients (AdamWStep::grad_scale), not a pass of its own.
#pragma once
#include "core/tensor.h"

namespace fathom {

// The global L2 norm of the gradients.
double grad_norm(const Tensor& grads);

// What the gradients are multiplied by so that their norm is at most max_norm: max_norm / norm when
// the norm exceeds it, else 1 (max_norm <= 0 disables clipping; a non-finite norm is left to the caller).
double clip_coefficient(double norm, double max_norm);

}  // namespace fathom

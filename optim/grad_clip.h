// Global gradient-norm clipping over the flat gradient arena.
#pragma once
#include "core/tensor.h"

namespace fathom {

// Returns the global L2 norm before clipping; scales grads by max_norm / norm when the norm exceeds
// max_norm (max_norm <= 0 disables clipping).
double clip_grad_norm(Tensor& grads, double max_norm);

}  // namespace fathom

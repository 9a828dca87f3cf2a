// Divergences of one tensor from another, each reduced to one element: the losses of layer-by-layer
// distillation (DESIGN.md 4.4, train/distill/distill_objective.h) of a student activation against a fixed
// teacher tensor, and the row cosine of two tensors (DSLA's gate similarity). Each gives one element (F32; F64 for F64 inputs). The kernels (kernels/divergences/divergences.h) run on the inputs'
// device: on a GPU the logits never leave it.
#pragma once
#include "autograd/variable.h"

namespace fathom {

// mean over all elements of (x - target)^2; target has x's shape (cast to x's dtype and device).
Variable mse_to_target(const Variable& x, const Tensor& target);

// T^2 * mean over rows of KL(softmax(target / T) || softmax(x / T)), rows over the last dimension:
// the logit distillation term (Hinton's T^2 keeps the gradient's scale independent of T). target
// has x's shape (cast to x's dtype and device).
Variable softmax_kl_to_target(const Variable& x, const Tensor& target, double temperature);

// mean over rows of the cosine similarity of a's and b's rows (0 for a row of zeros); a and b of
// one shape, dtype and device.
Variable mean_row_cosine(const Variable& a, const Variable& b);

}  // namespace fathom

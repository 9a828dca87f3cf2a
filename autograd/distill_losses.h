// The losses of layer-by-layer distillation (DESIGN.md 3.4, train/distill_objective.h): each reduces
// a student activation against a fixed teacher tensor (or two gate tensors against each other) to
// one element (F32; F64 for F64 inputs). Computed in f64 on the host, rows over the last dimension:
// they read one layer's output or the logits once per micro-batch, a copy to the host and back (on a
// GPU that copy, not a kernel, is their cost).
#pragma once
#include "autograd/variable.h"

namespace fathom {

// mean over all elements of (x - target)^2; target has x's shape (any dtype, any device).
Variable mse_to_target(const Variable& x, const Tensor& target);

// T^2 * mean over rows of KL(softmax(target / T) || softmax(x / T)), rows over the last dimension:
// the logit distillation term (Hinton's T^2 keeps the gradient's scale independent of T).
Variable softmax_kl_to_target(const Variable& x, const Tensor& target, double temperature);

// mean over rows of the cosine similarity of a's and b's rows (0 for a row of zeros).
Variable mean_row_cosine(const Variable& a, const Variable& b);

}  // namespace fathom

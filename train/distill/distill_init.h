// How a converted layer starts (DESIGN.md 4.4): the model's own initialisation (the dsla
// gates: state 1 W = I, state 2 small random, b = 0; gamma = 0.5), overlaid by the teacher's (or the
// previous M_k's) tensors of the same names, so the new layer keeps the teacher's q, k, v, o and
// QK-norm and every other layer is the source's.
#pragma once
#include "core/safetensors.h"

namespace fathom {

// Replaces each tensor of `weights` that `source` has by the source's. A source tensor the model
// lacks, or one of another shape, is an error naming it and `source_name`.
void overlay_weights(TensorMap& weights, const TensorMap& source, const std::string& source_name);

}  // namespace fathom

// Runs backward over the recorded graph.
#pragma once
#include "autograd/variable.h"

namespace fathom {

// Backpropagates from `root`. `seed` is d(objective)/d(root); when undefined, root must hold one
// element and the seed is 1. Leaf gradients accumulate in place into VariableImpl::grad (allocated
// on first use when undefined). Nodes run in decreasing creation order and free their saved tensors.
void backward(const Variable& root, const Tensor& seed = Tensor());

}  // namespace fathom

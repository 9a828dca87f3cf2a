// MoDA attention's differentiable op (DESIGN.md 4.2): q over its layer's causal k, v and the depth
// slots [begin, end) of a depth stream, in one softmax. The stream (autograd/depth_stream.h) checks
// the range and dtypes and calls this; the node it records routes the depth gradients into the
// stream's buffers, whence the slots' write nodes hand them to the writers.
#pragma once
#include <memory>

#include "autograd/depth_buffers.h"
#include "autograd/variable.h"

namespace fathom {

// q, k, v have the buffers' dtype. `version` is the stream's current version (the node's ordering
// input). `keys`: reader keys, the normalised key buffer this reader reads instead of buffers->k
// (its gradient is the node's last); undefined for writer keys.
Variable moda_attention(const std::shared_ptr<DepthBuffers>& buffers, const Variable& version, const Variable& q,
                        const Variable& k, const Variable& v, int64_t begin, int64_t end, double scale,
                        const Variable& keys = Variable());

}  // namespace fathom

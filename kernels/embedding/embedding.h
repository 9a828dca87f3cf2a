// Token embedding lookup: a gather of table rows, and its scatter-add gradient.
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// ids (I32 or I64) [...] -> table [V, d] rows as [..., d]. An id outside [0, V) is an error naming
// the id, its position and V.
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
// grad_table [V, d] += the rows of grad_out [..., d] scattered by ids. Deterministic: on the CPU every
// table row sums its contributions in the order of the ids; on CUDA in a fixed order for the shape
// (bit-identical across runs). grad_out has the table's dtype; on CUDA a BF16 grad_out may also
// accumulate into an F32 table gradient.
void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table);

// The backends' entry points. CUDA: F32 or BF16 tables; a bad id is reported at the next synchronisation
// (kernels/runtime/runtime.h), its output row is zero and its gradient is dropped.
using EmbeddingForwardKernel = Tensor(const Tensor& ids, const Tensor& table);
using EmbeddingBackwardKernel = void(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table);
FATHOM_BACKENDS(EmbeddingForwardKernel, embedding_forward)
FATHOM_BACKENDS(EmbeddingBackwardKernel, embedding_backward)

}  // namespace fathom

// The index of each row's largest value (greedy decoding's choice): x [rows, n] -> I32 [rows]. Ties go
// to the lowest index, so the CPU and CUDA agree; NaNs are never chosen (a row of NaNs gives 0).
#pragma once
#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

Tensor argmax_rows(const Tensor& x);
// The same into out, I32 [rows] on x's device (a decoding step writes it where the next step reads).
void argmax_rows_into(const Tensor& x, Tensor& out);

// The backends' entry point.
using ArgmaxRowsKernel = void(const Tensor& x, Tensor& out);
FATHOM_BACKENDS(ArgmaxRowsKernel, argmax_rows)

namespace cpu {
// One row's argmax by the rule above (the CPU reference's, shared with the host-side sampler).
int64_t argmax_row(std::span<const float> row);
}  // namespace cpu

}  // namespace fathom

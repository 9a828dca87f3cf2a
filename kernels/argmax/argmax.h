// The index of each row's largest value (greedy decoding's choice): x [rows, n] -> I32 [rows]. Ties go
// to the lowest index, so the CPU and CUDA agree; NaNs are never chosen (a row of NaNs gives 0).
#pragma once
#include "core/tensor.h"

namespace fathom {

Tensor argmax_rows(const Tensor& x);

namespace cpu {
Tensor argmax_rows(const Tensor& x);
}  // namespace cpu
namespace cuda {
Tensor argmax_rows(const Tensor& x);
}  // namespace cuda

}  // namespace fathom

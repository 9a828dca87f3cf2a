// The FP8 GEMM of FP8 linears: c [M, N] = (a * a_scale_inv) (b * b_scale_inv)^T, or c += that.
//
// a [M, K] and b [N, K] hold FP8 codes (DType::e4m3 or DType::e5m2; not both e5m2), each with its F32 [1]
// scale_inv on the device (kernels/fp8/fp8.h). Both operands have the inner dimension contiguous: the
// one layout ("TN" in cuBLAS's column-major terms) Hopper's FP8 GEMMs take, which is why the FP8 linear
// keeps transposed copies (fp8_cast_transpose) rather than transpose flags. The products accumulate in
// f32; c is BF16 or F32 on CUDA, F32 on the CPU. On CUDA, K and N must be multiples of 16 (cuBLASLt's
// FP8 alignment) and the device of compute capability 8.9 or newer. fast_accumulation lets Hopper keep
// partial sums in its tensor cores' reduced-precision accumulator longer (faster, less exact): the
// forward may use it, gradients never do.
//
// The CPU reference (FP8 emulation) dequantizes both operands to f32 and multiplies in f32.
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

struct Fp8GemmOptions {
  bool accumulate = false;         // c += product (else c = product)
  bool fast_accumulation = false;  // CUDA only; ignored by the CPU
};

void fp8_matmul(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv, Tensor& c,
                Fp8GemmOptions options = {});

// The backends' entry point.
using Fp8MatmulKernel = void(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                             Tensor& c, Fp8GemmOptions options);
FATHOM_BACKENDS(Fp8MatmulKernel, fp8_matmul)

}  // namespace fathom

// Dense 2-D matrix product: the GEMM behind every linear layer (callers flatten leading dims).
#pragma once
#include <span>

#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

// c [M, N] = alpha * op(a) op(b) + beta * c, where op(x) = x^T when its flag is set. a, b, c are
// 2-D, of one floating dtype, one device; c must not share storage with a or b. beta = 0
// overwrites c: its old contents (even NaN) are ignored. On CUDA, BF16 a and b may also write (or,
// with beta = 1, accumulate into) an F32 c: mixed precision's fp32 weight gradients.
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha = 1.0,
            double beta = 0.0);
// op(a) op(b) into a new tensor.
Tensor matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b);

// cs[i] = a bs[i]^T for several weights of one input (a layer's q/k/v or gate/up projections), each as
// matmul(a, false, bs[i], true, cs[i]) writes it; the outputs share no storage. On CUDA, where the skinny
// GEMM takes every product (a decoding step's few rows), one launch runs them all (skinny_matmul.h);
// otherwise they run one after the other.
void matmul_each(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs);

// The backends' entry points. CUDA runs cuBLASLt: F32 (strict f32), BF16/F16 (f32 accumulation) or F64;
// BF16 operands with an F32 c.
using MatmulKernel = void(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha,
                          double beta);
using MatmulEachKernel = void(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs);
FATHOM_BACKENDS(MatmulKernel, matmul)
FATHOM_BACKENDS(MatmulEachKernel, matmul_each)

}  // namespace fathom

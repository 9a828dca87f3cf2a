// Elementwise ops and reductions the engine, optimizer and model need. Floating tensors of one
// dtype and shape, except that on CUDA an F32 destination may accumulate a BF16 source (bf16
// gradients into the f32 gradient arena). Reductions return f64-accumulated numbers to the host;
// on CUDA they are deterministic (fixed two-level reduction) and synchronise the current stream.
#pragma once
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace fathom {

void add_inplace(Tensor& dst, const Tensor& src);                 // dst += src
Tensor add(const Tensor& a, const Tensor& b);                     // a + b
void axpy_inplace(Tensor& dst, double alpha, const Tensor& src);  // dst += alpha * src
void scale_inplace(Tensor& dst, double alpha);                    // dst *= alpha
double sum_squares(const Tensor& t);                              // sum of x^2, accumulated in f64
double sum(const Tensor& t);                                      // accumulated in f64
bool all_finite(const Tensor& t);

// The backends' entry points, one per op above.
using AddInplaceKernel = void(Tensor& dst, const Tensor& src);
using AddKernel = Tensor(const Tensor& a, const Tensor& b);
using AxpyInplaceKernel = void(Tensor& dst, double alpha, const Tensor& src);
using ScaleInplaceKernel = void(Tensor& dst, double alpha);
using ReduceKernel = double(const Tensor& t);  // sum_squares, sum
using AllFiniteKernel = bool(const Tensor& t);
FATHOM_BACKENDS(AddInplaceKernel, add_inplace)
FATHOM_BACKENDS(AddKernel, add)
FATHOM_BACKENDS(AxpyInplaceKernel, axpy_inplace)
FATHOM_BACKENDS(ScaleInplaceKernel, scale_inplace)
FATHOM_BACKENDS(ReduceKernel, sum_squares)
FATHOM_BACKENDS(ReduceKernel, sum)
FATHOM_BACKENDS(AllFiniteKernel, all_finite)

}  // namespace fathom

// Elementwise ops and reductions the engine, optimizer and model need. Floating tensors of one
// dtype and shape, except that on CUDA an F32 destination may accumulate a BF16 source (bf16
// gradients into the f32 gradient arena). Reductions return f64-accumulated numbers to the host;
// on CUDA they are deterministic (fixed two-level reduction) and synchronise the current stream.
#pragma once
#include "core/tensor.h"

namespace fathom {

void add_inplace(Tensor& dst, const Tensor& src);                // dst += src
Tensor add(const Tensor& a, const Tensor& b);                     // a + b
void axpy_inplace(Tensor& dst, double alpha, const Tensor& src);  // dst += alpha * src
void scale_inplace(Tensor& dst, double alpha);                    // dst *= alpha
double sum_squares(const Tensor& t);                              // sum of x^2, accumulated in f64
double sum(const Tensor& t);                                      // accumulated in f64
bool all_finite(const Tensor& t);

namespace cpu {
void add_inplace(Tensor& dst, const Tensor& src);
Tensor add(const Tensor& a, const Tensor& b);
void axpy_inplace(Tensor& dst, double alpha, const Tensor& src);
void scale_inplace(Tensor& dst, double alpha);
double sum_squares(const Tensor& t);
double sum(const Tensor& t);
bool all_finite(const Tensor& t);
}  // namespace cpu

namespace cuda {
void add_inplace(Tensor& dst, const Tensor& src);
Tensor add(const Tensor& a, const Tensor& b);
void axpy_inplace(Tensor& dst, double alpha, const Tensor& src);
void scale_inplace(Tensor& dst, double alpha);
double sum_squares(const Tensor& t);
double sum(const Tensor& t);
bool all_finite(const Tensor& t);
}  // namespace cuda

}  // namespace fathom

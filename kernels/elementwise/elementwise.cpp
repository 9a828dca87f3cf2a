#include "kernels/elementwise/elementwise.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_same(const char* op, const Tensor& a, const Tensor& b) {
  FATHOM_CHECK(a.defined() && b.defined(), op, ": undefined tensor");
  FATHOM_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), op, ": ", describe(a), " and ", describe(b),
               " differ in shape or dtype");
}
// dst += (alpha *) src: one dtype, or a BF16 source into an F32 destination on CUDA.
void check_accumulate(const char* op, const Tensor& dst, const Tensor& src) {
  FATHOM_CHECK(dst.defined() && src.defined(), op, ": undefined tensor");
  const bool mixed = dst.dtype() == DType::f32 && src.dtype() == DType::bf16 && dst.device().is_cuda();
  FATHOM_CHECK(dst.shape() == src.shape() && (dst.dtype() == src.dtype() || mixed), op, ": ", describe(dst), " and ",
               describe(src), " differ in shape or dtype (only a CUDA F32 destination accumulates a BF16 source)");
}
void check_defined(const char* op, const Tensor& t) { FATHOM_CHECK(t.defined(), op, ": undefined tensor"); }
}  // namespace

void add_inplace(Tensor& dst, const Tensor& src) {
  check_accumulate("add_inplace", dst, src);
  if (common_device("add_inplace", {&dst, &src}).is_cpu()) return cpu::add_inplace(dst, src);
#ifdef FATHOM_WITH_CUDA
  return cuda::add_inplace(dst, src);
#else
  no_cuda_kernel("add_inplace");
#endif
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_same("add", a, b);
  if (common_device("add", {&a, &b}).is_cpu()) return cpu::add(a, b);
#ifdef FATHOM_WITH_CUDA
  return cuda::add(a, b);
#else
  no_cuda_kernel("add");
#endif
}

void axpy_inplace(Tensor& dst, double alpha, const Tensor& src) {
  check_accumulate("axpy_inplace", dst, src);
  if (common_device("axpy_inplace", {&dst, &src}).is_cpu()) return cpu::axpy_inplace(dst, alpha, src);
#ifdef FATHOM_WITH_CUDA
  return cuda::axpy_inplace(dst, alpha, src);
#else
  no_cuda_kernel("axpy_inplace");
#endif
}

void scale_inplace(Tensor& dst, double alpha) {
  check_defined("scale_inplace", dst);
  if (dst.is_cpu()) return cpu::scale_inplace(dst, alpha);
#ifdef FATHOM_WITH_CUDA
  return cuda::scale_inplace(dst, alpha);
#else
  no_cuda_kernel("scale_inplace");
#endif
}

double sum_squares(const Tensor& t) {
  check_defined("sum_squares", t);
  if (t.is_cpu()) return cpu::sum_squares(t);
#ifdef FATHOM_WITH_CUDA
  return cuda::sum_squares(t);
#else
  no_cuda_kernel("sum_squares");
#endif
}

double sum(const Tensor& t) {
  check_defined("sum", t);
  if (t.is_cpu()) return cpu::sum(t);
#ifdef FATHOM_WITH_CUDA
  return cuda::sum(t);
#else
  no_cuda_kernel("sum");
#endif
}

bool all_finite(const Tensor& t) {
  check_defined("all_finite", t);
  if (t.is_cpu()) return cpu::all_finite(t);
#ifdef FATHOM_WITH_CUDA
  return cuda::all_finite(t);
#else
  no_cuda_kernel("all_finite");
#endif
}

}  // namespace fathom

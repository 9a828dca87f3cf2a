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
  return on_device("add_inplace", common_device("add_inplace", {&dst, &src}), FATHOM_KERNEL(add_inplace), dst, src);
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_same("add", a, b);
  return on_device("add", common_device("add", {&a, &b}), FATHOM_KERNEL(add), a, b);
}

void axpy_inplace(Tensor& dst, double alpha, const Tensor& src) {
  check_accumulate("axpy_inplace", dst, src);
  return on_device("axpy_inplace", common_device("axpy_inplace", {&dst, &src}), FATHOM_KERNEL(axpy_inplace), dst, alpha,
                   src);
}

void scale_inplace(Tensor& dst, double alpha) {
  check_defined("scale_inplace", dst);
  return on_device("scale_inplace", dst.device(), FATHOM_KERNEL(scale_inplace), dst, alpha);
}

double sum_squares(const Tensor& t) {
  check_defined("sum_squares", t);
  return on_device("sum_squares", t.device(), FATHOM_KERNEL(sum_squares), t);
}

double sum(const Tensor& t) {
  check_defined("sum", t);
  return on_device("sum", t.device(), FATHOM_KERNEL(sum), t);
}

bool all_finite(const Tensor& t) {
  check_defined("all_finite", t);
  return on_device("all_finite", t.device(), FATHOM_KERNEL(all_finite), t);
}

}  // namespace fathom

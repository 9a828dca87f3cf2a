#include "kernels/elementwise.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_same(const char* op, const Tensor& a, const Tensor& b) {
  FATHOM_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), op, ": ", describe(a), " and ", describe(b),
               " differ in shape or dtype");
}
}  // namespace

void add_inplace(Tensor& dst, const Tensor& src) {
  check_same("add_inplace", dst, src);
  if (common_device("add_inplace", {&dst, &src}).is_cpu()) return cpu::add_inplace(dst, src);
  no_cuda_kernel("add_inplace");
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_same("add", a, b);
  if (common_device("add", {&a, &b}).is_cpu()) return cpu::add(a, b);
  no_cuda_kernel("add");
}

void axpy_inplace(Tensor& dst, double alpha, const Tensor& src) {
  check_same("axpy_inplace", dst, src);
  if (common_device("axpy_inplace", {&dst, &src}).is_cpu()) return cpu::axpy_inplace(dst, alpha, src);
  no_cuda_kernel("axpy_inplace");
}

void scale_inplace(Tensor& dst, double alpha) {
  if (dst.is_cpu()) return cpu::scale_inplace(dst, alpha);
  no_cuda_kernel("scale_inplace");
}

double sum_squares(const Tensor& t) {
  if (t.is_cpu()) return cpu::sum_squares(t);
  no_cuda_kernel("sum_squares");
}

double sum(const Tensor& t) {
  if (t.is_cpu()) return cpu::sum(t);
  no_cuda_kernel("sum");
}

bool all_finite(const Tensor& t) {
  if (t.is_cpu()) return cpu::all_finite(t);
  no_cuda_kernel("all_finite");
}

}  // namespace fathom

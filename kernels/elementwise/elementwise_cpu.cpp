// CPU reference for elementwise ops and reductions (reductions accumulate in double).
#include <cmath>

#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"

namespace fathom::cpu {

void add_inplace(Tensor& dst, const Tensor& src) { cpu::axpy_inplace(dst, 1.0, src); }

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = a.clone();
  cpu::add_inplace(out, b);
  return out;
}

void axpy_inplace(Tensor& dst, double alpha, const Tensor& src) {
  dispatch_float("axpy_inplace", dst.dtype(), [&]<typename T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const T a = T(alpha);
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] += a * s[i];
  });
}

void scale_inplace(Tensor& dst, double alpha) {
  dispatch_float("scale_inplace", dst.dtype(), [&]<typename T>() {
    T* d = dst.data<T>();
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] *= T(alpha);
  });
}

double sum_squares(const Tensor& t) {
  double total = 0;
  dispatch_float("sum_squares", t.dtype(), [&]<typename T>() {
    const T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) total += double(p[i]) * double(p[i]);
  });
  return total;
}

double sum(const Tensor& t) {
  double total = 0;
  dispatch_float("sum", t.dtype(), [&]<typename T>() {
    const T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) total += double(p[i]);
  });
  return total;
}

bool all_finite(const Tensor& t) {
  bool finite = true;
  dispatch_float("all_finite", t.dtype(), [&]<typename T>() {
    const T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n && finite; ++i) finite = std::isfinite(p[i]);
  });
  return finite;
}

}  // namespace fathom::cpu

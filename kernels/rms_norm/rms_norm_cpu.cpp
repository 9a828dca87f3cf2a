// CPU RMSNorm. Row statistics accumulate in double. The weight gradient is reduced over fixed blocks
// of rows and the block partials are summed in order, so it does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/rms_norm/rms_norm.h"

namespace fathom::cpu {

RmsNormOutput rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& residual) {
  const int64_t n = x.dim(-1), rows = x.shape().rows();
  RmsNormOutput out{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({rows}, x.dtype())};
  dispatch_float("rms_norm", x.dtype(), [&]<typename T>() {
    const T* xp = x.data<T>();
    const T* w = weight.data<T>();
    T* y = out.y.data<T>();
    T* rs = out.rstd.data<T>();
    const T* res = residual.defined() ? residual.data<T>() : nullptr;
#pragma omp parallel for schedule(static) if (rows * n > kMinParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = xp + r * n;
      double sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t i = 0; i < n; ++i) sq += double(xr[i]) * double(xr[i]);
      const T rstd = T(1.0 / std::sqrt(sq / double(n) + eps));
      rs[r] = rstd;
      T* yr = y + r * n;
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * rstd * w[i];
      if (res != nullptr)
        for (int64_t i = 0; i < n; ++i) yr[i] += res[r * n + i];
    }
  });
  return out;
}

// The reference is the two ops it joins.
AddRmsNormOutput add_rms_norm_forward(const Tensor& residual, const Tensor& x, const Tensor& weight, double eps) {
  Tensor sum = fathom::add(residual, x);
  RmsNormOutput normed = cpu::rms_norm_forward(sum, weight, eps, Tensor());
  return {std::move(sum), std::move(normed)};
}

// The CPU takes no BF16, so the weight gradient's dtype is the weight's: dweight_dtype has no choice to make.
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               DType dweight_dtype) {
  const int64_t n = x.dim(-1), rows = x.shape().rows();
  RmsNormGrads grads{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(weight.shape(), weight.dtype())};
  dispatch_float("rms_norm_backward", x.dtype(), [&]<typename T>() {
    const T* dy = grad_y.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.data<T>();
    const T* rs = rstd.data<T>();
    T* dx = grads.dx.data<T>();
    constexpr int64_t kBlockRows = 64;
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    std::vector<double> partial(size_t(std::max<int64_t>(blocks, 1) * n), 0.0);
#pragma omp parallel for schedule(static) if (rows * n > kMinParallelElements)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      double* dw = partial.data() + blk * n;
      for (int64_t r = blk * kBlockRows, r1 = std::min(rows, r + kBlockRows); r < r1; ++r) {
        const T* xr = xp + r * n;
        const T* dyr = dy + r * n;
        const double rstd_r = double(rs[r]);
        // dx = rstd * (g - x * rstd^2 * mean(g * x)), with g = dy * weight.
        double gx = 0;
#pragma omp simd reduction(+ : gx)
        for (int64_t i = 0; i < n; ++i) gx += double(dyr[i]) * double(w[i]) * double(xr[i]);
        const T a = T(rstd_r), b = T(rstd_r * rstd_r * rstd_r * gx / double(n));
        T* dxr = dx + r * n;
        for (int64_t i = 0; i < n; ++i) {
          dxr[i] = a * dyr[i] * w[i] - b * xr[i];
          dw[i] += double(dyr[i]) * double(xr[i]) * rstd_r;
        }
      }
    }
    T* dweight = grads.dweight.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      double total = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) total += partial[blk * n + i];
      dweight[i] = T(total);
    }
  });
  return grads;
}

}  // namespace fathom::cpu

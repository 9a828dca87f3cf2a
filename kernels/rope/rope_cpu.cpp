// CPU rotary embedding: the (cos, sin) table in f64, then one pass over x rotating each pair in x's dtype.
#include <cmath>
#include <vector>

#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/rope/rope.h"

namespace fathom::cpu {

Tensor rope_angles(const Tensor& positions, int64_t head_dim, double theta, const RopeScaling& scaling) {
  const int64_t n_pos = positions.numel(), half = head_dim / 2;
  // Read positions as int64 and validate them before any thread starts.
  std::vector<int64_t> pos(static_cast<size_t>(n_pos));
  dispatch_index("rope", "positions", positions.dtype(), [&]<typename I>() {
    const I* p = positions.data<I>();
    for (size_t i = 0; i < pos.size(); ++i) {
      FATHOM_CHECK(p[i] >= 0, "rope: position ", int64_t(p[i]), " at index ", i, " is negative");
      pos[i] = int64_t(p[i]);
    }
  });
  const std::vector<double> inv_freq = rope_inverse_frequencies(head_dim, theta, scaling);
  std::vector<int64_t> dims = positions.shape().vec();
  dims.insert(dims.end(), {half, 2});
  Tensor angles = Tensor::empty(Shape(dims), DType::f64);
  double* a = angles.data<double>();
#pragma omp parallel for schedule(static) if (n_pos * half > kMinParallelWork)
  for (int64_t p = 0; p < n_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(pos[size_t(p)]) * inv_freq[size_t(i)];
      a[2 * (p * half + i)] = std::cos(angle);
      a[2 * (p * half + i) + 1] = std::sin(angle);
    }
  return angles;
}

Tensor rope_apply(const Tensor& x, const Tensor& angles, bool inverse) {
  const int64_t B = x.dim(0), seq = x.dim(1), H = x.dim(2), d = x.dim(3), half = d / 2;
  const bool per_row = angles.rank() == 4;
  const double sign = inverse ? -1.0 : 1.0;
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("rope", x.dtype(), [&]<typename T>() {
    const double* a = angles.data<double>();
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() > kMinParallelElements)
    for (int64_t bt = 0; bt < B * seq; ++bt) {
      const double* row = a + 2 * (per_row ? bt : bt % seq) * half;
      for (int64_t h = 0; h < H; ++h) {
        const T* xr = xp + (bt * H + h) * d;
        T* yr = yp + (bt * H + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          // cos and sin rounded to x's dtype, so the rotation runs in it.
          const T c = T(row[2 * i]), s = T(sign * row[2 * i + 1]);
          const T x1 = xr[i], x2 = xr[i + half];
          yr[i] = x1 * c - x2 * s;
          yr[i + half] = x2 * c + x1 * s;
        }
      }
    }
  });
  return y;
}

}  // namespace fathom::cpu

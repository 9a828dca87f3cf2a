// CPU rotary embedding: a cos/sin table per distinct (row, position), then one pass over x.
#include <cmath>
#include <vector>

#include "kernels/cpu_support/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/rope/rope.h"

namespace fathom::cpu {

Tensor rope_rotate(const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling, bool inverse) {
  const int64_t B = x.dim(0), seq = x.dim(1), H = x.dim(2), d = x.dim(3), half = d / 2;
  const bool per_row = positions.rank() == 2;
  // Read positions as int64 and validate them before any thread starts.
  std::vector<int64_t> pos(size_t(positions.numel()));
  dispatch_index("rope", "positions", positions.dtype(), [&]<typename I>() {
    const I* p = positions.data<I>();
    for (size_t i = 0; i < pos.size(); ++i) {
      FATHOM_CHECK(p[i] >= 0, "rope: position ", int64_t(p[i]), " at index ", i, " is negative");
      pos[i] = int64_t(p[i]);
    }
  });
  const std::vector<double> inv_freq = rope_inverse_frequencies(d, theta, scaling);

  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("rope", x.dtype(), [&]<typename T>() {
    const int64_t n_pos = int64_t(pos.size());
    std::vector<T> cos_table(size_t(n_pos * half)), sin_table(size_t(n_pos * half));
    const double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel for schedule(static) if (n_pos * half > kMinParallelWork)
    for (int64_t p = 0; p < n_pos; ++p)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(pos[p]) * inv_freq[i];
        cos_table[p * half + i] = T(std::cos(angle));
        sin_table[p * half + i] = T(sign * std::sin(angle));
      }
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (x.numel() > kMinParallelElements)
    for (int64_t bt = 0; bt < B * seq; ++bt) {
      const int64_t p = per_row ? bt : bt % seq;
      const T* c = cos_table.data() + p * half;
      const T* s = sin_table.data() + p * half;
      for (int64_t h = 0; h < H; ++h) {
        const T* xr = xp + (bt * H + h) * d;
        T* yr = yp + (bt * H + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const T x1 = xr[i], x2 = xr[i + half];
          yr[i] = x1 * c[i] - x2 * s[i];
          yr[i + half] = x2 * c[i] + x1 * s[i];
        }
      }
    }
  });
  return y;
}

}  // namespace fathom::cpu

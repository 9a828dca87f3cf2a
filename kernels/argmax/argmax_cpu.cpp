#include "kernels/argmax/argmax.h"

#include <vector>

#include "kernels/dispatch.h"

namespace fathom::cpu {

Tensor argmax_rows(const Tensor& x) {
  const Tensor values = x.to(DType::f32);
  const int64_t rows = x.dim(0), n = x.dim(1);
  const float* v = values.data<float>();
  std::vector<int32_t> out(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = v + r * n;
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
      if (row[i] == row[i] && (best < 0 || row[i] > row[best])) best = i;  // row[i] == row[i]: not NaN
    out[size_t(r)] = int32_t(best < 0 ? 0 : best);
  }
  return Tensor::from_vector(out, {rows});
}

}  // namespace fathom::cpu

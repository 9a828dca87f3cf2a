#include "kernels/argmax/argmax.h"

#include <vector>

#include "kernels/dispatch.h"

namespace fathom::cpu {

int64_t argmax_row(std::span<const float> row) {
  int64_t best = -1;
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] == row[i] && (best < 0 || row[i] > row[size_t(best)])) best = int64_t(i);  // row[i] == row[i]: not NaN
  return best < 0 ? 0 : best;
}

Tensor argmax_rows(const Tensor& x) {
  const Tensor values = x.to(DType::f32);
  const int64_t rows = x.dim(0), n = x.dim(1);
  const float* v = values.data<float>();
  std::vector<int32_t> out(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) out[size_t(r)] = int32_t(argmax_row(std::span<const float>(v + r * n, size_t(n))));
  return Tensor::from_vector(out, {rows});
}

}  // namespace fathom::cpu

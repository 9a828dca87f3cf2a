#include "kernels/argmax/argmax.h"

#include "kernels/dispatch.h"

namespace fathom::cpu {

int64_t argmax_row(std::span<const float> row) {
  int64_t best = -1;
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] == row[i] && (best < 0 || row[i] > row[size_t(best)])) best = int64_t(i);  // row[i] == row[i]: not NaN
  return best < 0 ? 0 : best;
}

void argmax_rows(const Tensor& x, Tensor& out) {
  const Tensor values = x.to(DType::f32);
  const int64_t rows = x.dim(0), n = x.dim(1);
  const float* v = values.data<float>();
  int32_t* o = out.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) o[r] = int32_t(argmax_row(std::span<const float>(v + r * n, size_t(n))));
}

}  // namespace fathom::cpu

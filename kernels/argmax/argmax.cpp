#include "kernels/argmax/argmax.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {

void check_rows(const Tensor& x) {
  FATHOM_CHECK(x.defined() && x.rank() == 2 && x.dim(1) >= 1 && x.dim(1) <= (int64_t(1) << 31) - 1,
               "argmax_rows: x must be [rows, n] with 1 <= n < 2^31, got ", describe(x));
}

}  // namespace

void argmax_rows_into(const Tensor& x, Tensor& out) {
  check_rows(x);
  FATHOM_CHECK(out.defined() && out.dtype() == DType::i32 && out.numel() == x.dim(0),
               "argmax_rows: out must be an I32 tensor of ", x.dim(0), " elements, got ", describe(out));
  const Device device = common_device("argmax_rows", {&x, &out});
  on_device("argmax_rows", device, FATHOM_KERNEL(argmax_rows), x, out);
}

Tensor argmax_rows(const Tensor& x) {
  check_rows(x);
  Tensor out = Tensor::empty({x.dim(0)}, DType::i32, x.device());
  argmax_rows_into(x, out);
  return out;
}

}  // namespace fathom

#include "kernels/argmax/argmax.h"

#include "kernels/dispatch.h"

namespace fathom {

Tensor argmax_rows(const Tensor& x) {
  FATHOM_CHECK(x.defined() && x.rank() == 2 && x.dim(1) >= 1 && x.dim(1) <= (int64_t(1) << 31) - 1,
               "argmax_rows: x must be [rows, n] with 1 <= n < 2^31, got ", describe(x));
  return on_device("argmax_rows", x.device(), FATHOM_KERNEL(argmax_rows), x);
}

}  // namespace fathom

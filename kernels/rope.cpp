#include "kernels/rope.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_rope(const char* op, const Tensor& x, const Tensor& positions, double theta) {
  FATHOM_CHECK(x.defined() && x.rank() == 4, op, ": x must be [B, T, H, d], got ", describe(x));
  FATHOM_CHECK(x.dim(3) % 2 == 0, op, ": head dim must be even to split into rotation pairs, got ", x.dim(3),
               " in ", describe(x));
  FATHOM_CHECK(positions.defined(), op, ": positions are undefined");
  FATHOM_CHECK(positions.dtype() == DType::i32 || positions.dtype() == DType::i64, op,
               ": positions must be I32 or I64, got ", describe(positions));
  const bool shared = positions.rank() == 1 && positions.dim(0) == x.dim(1);
  const bool per_row = positions.rank() == 2 && positions.dim(0) == x.dim(0) && positions.dim(1) == x.dim(1);
  FATHOM_CHECK(shared || per_row, op, ": positions ", describe(positions), " must be [T] = [", x.dim(1),
               "] or [B, T] = [", x.dim(0), ", ", x.dim(1), "] for x ", describe(x));
  FATHOM_CHECK(theta > 0 && std::isfinite(theta), op, ": theta must be positive and finite, got ", theta);
}
}  // namespace

Tensor rope_forward(const Tensor& x, const Tensor& positions, double theta) {
  check_rope("rope", x, positions, theta);
  if (common_device("rope", {&x, &positions}).is_cpu()) return cpu::rope_rotate(x, positions, theta, false);
#ifdef FATHOM_WITH_CUDA
  return cuda::rope_rotate(x, positions, theta, false);
#else
  no_cuda_kernel("rope");
#endif
}

Tensor rope_backward(const Tensor& grad_y, const Tensor& positions, double theta) {
  check_rope("rope_backward", grad_y, positions, theta);
  if (common_device("rope_backward", {&grad_y, &positions}).is_cpu())
    return cpu::rope_rotate(grad_y, positions, theta, true);
#ifdef FATHOM_WITH_CUDA
  return cuda::rope_rotate(grad_y, positions, theta, true);
#else
  no_cuda_kernel("rope_backward");
#endif
}

}  // namespace fathom

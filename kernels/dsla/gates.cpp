#include "kernels/dsla/gates.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {

void check_defined(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) FATHOM_CHECK(t->defined(), op, ": undefined input");
}

bool is_stats_dtype(DType t) { return t == DType::f32 || t == DType::f64; }

}  // namespace

Tensor log_sigmoid_gate_forward(const Tensor& z, const Tensor& bias, double scale) {
  check_defined("log_sigmoid_gate", {&z, &bias});
  FATHOM_CHECK(z.rank() >= 1 && bias.rank() == 1 && bias.dim(0) == z.dim(-1), "log_sigmoid_gate: bias ",
               describe(bias), " must be [n] for z ", describe(z), " [..., n]");
  FATHOM_CHECK(bias.dtype() == stats_dtype(z.dtype()), "log_sigmoid_gate: bias must be ",
               dtype_name(stats_dtype(z.dtype())), " for z ", describe(z), ", got ", describe(bias));
  if (common_device("log_sigmoid_gate", {&z, &bias}).is_cpu()) return cpu::log_sigmoid_gate_forward(z, bias, scale);
#ifdef FATHOM_WITH_CUDA
  return cuda::log_sigmoid_gate_forward(z, bias, scale);
#else
  no_cuda_kernel("log_sigmoid_gate");
#endif
}

Tensor log_sigmoid_gate_backward(const Tensor& grad_g, const Tensor& g, double scale) {
  check_defined("log_sigmoid_gate_backward", {&grad_g, &g});
  FATHOM_CHECK(grad_g.shape() == g.shape() && grad_g.dtype() == g.dtype() && is_stats_dtype(g.dtype()),
               "log_sigmoid_gate_backward: grad_g ", describe(grad_g), " and g ", describe(g),
               " must have one shape and dtype, F32 or F64");
  if (common_device("log_sigmoid_gate_backward", {&grad_g, &g}).is_cpu())
    return cpu::log_sigmoid_gate_backward(grad_g, g, scale);
#ifdef FATHOM_WITH_CUDA
  return cuda::log_sigmoid_gate_backward(grad_g, g, scale);
#else
  no_cuda_kernel("log_sigmoid_gate_backward");
#endif
}

Tensor sigmoid_expand_forward(const Tensor& logits, int64_t n) {
  check_defined("sigmoid_expand", {&logits});
  FATHOM_CHECK(logits.rank() == 1 && logits.dim(0) >= 1 && n >= 1 && n % logits.dim(0) == 0 &&
                   is_stats_dtype(logits.dtype()),
               "sigmoid_expand: logits ", describe(logits), " must be F32 or F64 [m] with m dividing n = ", n);
  if (logits.is_cpu()) return cpu::sigmoid_expand_forward(logits, n);
#ifdef FATHOM_WITH_CUDA
  return cuda::sigmoid_expand_forward(logits, n);
#else
  no_cuda_kernel("sigmoid_expand");
#endif
}

Tensor sigmoid_expand_backward(const Tensor& grad_y, const Tensor& y, int64_t m) {
  check_defined("sigmoid_expand_backward", {&grad_y, &y});
  FATHOM_CHECK(y.rank() == 1 && grad_y.shape() == y.shape() && grad_y.dtype() == y.dtype() &&
                   is_stats_dtype(y.dtype()) && m >= 1 && y.dim(0) % m == 0,
               "sigmoid_expand_backward: grad_y ", describe(grad_y), " and y ", describe(y),
               " must be one F32 or F64 [n] with n a multiple of m = ", m);
  if (common_device("sigmoid_expand_backward", {&grad_y, &y}).is_cpu()) return cpu::sigmoid_expand_backward(grad_y, y, m);
#ifdef FATHOM_WITH_CUDA
  return cuda::sigmoid_expand_backward(grad_y, y, m);
#else
  no_cuda_kernel("sigmoid_expand_backward");
#endif
}

}  // namespace fathom

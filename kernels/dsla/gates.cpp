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
  FATHOM_CHECK(z.rank() >= 1 && bias.rank() == 1 && bias.dim(0) == z.dim(-1), "log_sigmoid_gate: bias ", describe(bias),
               " must be [n] for z ", describe(z), " [..., n]");
  FATHOM_CHECK(bias.dtype() == stats_dtype(z.dtype()), "log_sigmoid_gate: bias must be ",
               dtype_name(stats_dtype(z.dtype())), " for z ", describe(z), ", got ", describe(bias));
  return on_device("log_sigmoid_gate", common_device("log_sigmoid_gate", {&z, &bias}),
                   FATHOM_KERNEL(log_sigmoid_gate_forward), z, bias, scale);
}

Tensor log_sigmoid_gate_backward(const Tensor& grad_g, const Tensor& g, double scale) {
  check_defined("log_sigmoid_gate_backward", {&grad_g, &g});
  FATHOM_CHECK(grad_g.shape() == g.shape() && grad_g.dtype() == g.dtype() && is_stats_dtype(g.dtype()),
               "log_sigmoid_gate_backward: grad_g ", describe(grad_g), " and g ", describe(g),
               " must have one shape and dtype, F32 or F64");
  return on_device("log_sigmoid_gate_backward", common_device("log_sigmoid_gate_backward", {&grad_g, &g}),
                   FATHOM_KERNEL(log_sigmoid_gate_backward), grad_g, g, scale);
}

Tensor sigmoid_expand_forward(const Tensor& logits, int64_t n) {
  check_defined("sigmoid_expand", {&logits});
  FATHOM_CHECK(
      logits.rank() == 1 && logits.dim(0) >= 1 && n >= 1 && n % logits.dim(0) == 0 && is_stats_dtype(logits.dtype()),
      "sigmoid_expand: logits ", describe(logits), " must be F32 or F64 [m] with m dividing n = ", n);
  return on_device("sigmoid_expand", logits.device(), FATHOM_KERNEL(sigmoid_expand_forward), logits, n);
}

Tensor sigmoid_expand_backward(const Tensor& grad_y, const Tensor& y, int64_t m) {
  check_defined("sigmoid_expand_backward", {&grad_y, &y});
  FATHOM_CHECK(y.rank() == 1 && grad_y.shape() == y.shape() && grad_y.dtype() == y.dtype() &&
                   is_stats_dtype(y.dtype()) && m >= 1 && y.dim(0) % m == 0,
               "sigmoid_expand_backward: grad_y ", describe(grad_y), " and y ", describe(y),
               " must be one F32 or F64 [n] with n a multiple of m = ", m);
  return on_device("sigmoid_expand_backward", common_device("sigmoid_expand_backward", {&grad_y, &y}),
                   FATHOM_KERNEL(sigmoid_expand_backward), grad_y, y, m);
}

}  // namespace fathom

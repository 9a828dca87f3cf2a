#include "kernels/rms_norm/rms_norm.h"

#include <cmath>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

namespace {
void check_x_weight(const char* op, const Tensor& x, const Tensor& weight) {
  FATHOM_CHECK(x.defined() && weight.defined(), op, ": undefined input");
  FATHOM_CHECK(x.rank() >= 1, op, ": x must have at least one dimension, got ", describe(x));
  FATHOM_CHECK(weight.rank() == 1 && weight.dim(0) == x.dim(-1), op, ": weight ", describe(weight), " must be [",
               x.dim(-1), "] to match the last dimension of x ", describe(x));
  FATHOM_CHECK(x.dtype() == weight.dtype(), op, ": x ", describe(x), " and weight ", describe(weight),
               " differ in dtype");
}
}  // namespace

RmsNormOutput rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& residual) {
  check_x_weight("rms_norm", x, weight);
  FATHOM_CHECK(eps > 0 && std::isfinite(eps), "rms_norm: eps must be positive and finite, got ", eps);
  if (residual.defined())
    FATHOM_CHECK(residual.shape() == x.shape() && residual.dtype() == x.dtype(), "rms_norm: residual ",
                 describe(residual), " must match x ", describe(x));
  const Device device = residual.defined() ? common_device("rms_norm", {&x, &weight, &residual})
                                           : common_device("rms_norm", {&x, &weight});
  return on_device("rms_norm", device, FATHOM_KERNEL(rms_norm_forward), x, weight, eps, residual);
}

namespace {
constinit KernelChoice<Fusion> add_rms_norm_in_force("FATHOM_ADD_RMS_NORM", Fusion::fused, parse_fusion);
}  // namespace

Fusion add_rms_norm_choice() { return add_rms_norm_in_force.get(); }

void set_add_rms_norm_choice(Fusion choice) { add_rms_norm_in_force.set(choice); }

bool add_rms_norm_takes_one_pass(int64_t rows) {
  return add_rms_norm_choice() == Fusion::fused && (rows == 1 || rows >= kAddRmsNormOnePassMinRows);
}

AddRmsNormOutput add_rms_norm_forward(const Tensor& residual, const Tensor& x, const Tensor& weight, double eps) {
  check_x_weight("add_rms_norm", x, weight);
  FATHOM_CHECK(eps > 0 && std::isfinite(eps), "add_rms_norm: eps must be positive and finite, got ", eps);
  FATHOM_CHECK(residual.defined() && residual.shape() == x.shape() && residual.dtype() == x.dtype(),
               "add_rms_norm: residual ", residual.defined() ? describe(residual) : std::string("undefined"),
               " must match x ", describe(x));
  return on_device("add_rms_norm", common_device("add_rms_norm", {&residual, &x, &weight}),
                   FATHOM_KERNEL(add_rms_norm_forward), residual, x, weight, eps);
}

RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               std::optional<DType> dweight_dtype) {
  check_x_weight("rms_norm_backward", x, weight);
  const DType dw = dweight_dtype.value_or(weight.dtype());
  FATHOM_CHECK(dw == weight.dtype() || (dw == DType::f32 && weight.dtype() == DType::bf16),
               "rms_norm_backward: the weight gradient can be ", dtype_name(weight.dtype()),
               " (the weight's dtype) or, for a BF16 weight, F32; asked for ", dtype_name(dw));
  FATHOM_CHECK(grad_y.defined() && grad_y.shape() == x.shape() && grad_y.dtype() == x.dtype(),
               "rms_norm_backward: grad_y ", describe(grad_y), " does not match x ", describe(x));
  const DType stats = stats_dtype(x.dtype());
  FATHOM_CHECK(rstd.defined() && rstd.rank() == 1 && rstd.dim(0) == x.shape().rows() && rstd.dtype() == stats,
               "rms_norm_backward: rstd ", describe(rstd), " should be ", dtype_name(stats), "[", x.shape().rows(),
               "]");
  return on_device("rms_norm_backward", common_device("rms_norm_backward", {&grad_y, &x, &weight, &rstd}),
                   FATHOM_KERNEL(rms_norm_backward), grad_y, x, weight, rstd, dw);
}

}  // namespace fathom

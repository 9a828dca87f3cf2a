#include "kernels/swiglu/swiglu.h"

#include "kernels/dispatch.h"

namespace fathom {

namespace {
void check_same(const char* op, const char* name, const Tensor& t, const Tensor& gate) {
  FATHOM_CHECK(t.defined() && gate.defined(), op, ": undefined input");
  FATHOM_CHECK(t.shape() == gate.shape() && t.dtype() == gate.dtype(), op, ": ", name, " ", describe(t),
               " does not match gate ", describe(gate));
}
}  // namespace

Tensor swiglu_forward(const Tensor& gate, const Tensor& up) {
  check_same("swiglu", "up", up, gate);
  return on_device("swiglu", common_device("swiglu", {&gate, &up}), FATHOM_KERNEL(swiglu_forward), gate, up);
}

SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up) {
  check_same("swiglu_backward", "up", up, gate);
  check_same("swiglu_backward", "grad_y", grad_y, gate);
  return on_device("swiglu_backward", common_device("swiglu_backward", {&grad_y, &gate, &up}),
                   FATHOM_KERNEL(swiglu_backward), grad_y, gate, up);
}

Tensor silu_forward(const Tensor& x) {
  FATHOM_CHECK(x.defined(), "silu: undefined input");
  return on_device("silu", x.device(), FATHOM_KERNEL(silu_forward), x);
}

Tensor silu_backward(const Tensor& grad_y, const Tensor& x) {
  check_same("silu_backward", "grad_y", grad_y, x);
  return on_device("silu_backward", common_device("silu_backward", {&grad_y, &x}), FATHOM_KERNEL(silu_backward), grad_y,
                   x);
}

}  // namespace fathom

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
  if (common_device("swiglu", {&gate, &up}).is_cpu()) return cpu::swiglu_forward(gate, up);
#ifdef FATHOM_WITH_CUDA
  return cuda::swiglu_forward(gate, up);
#else
  no_cuda_kernel("swiglu");
#endif
}

SwigluGrads swiglu_backward(const Tensor& grad_y, const Tensor& gate, const Tensor& up) {
  check_same("swiglu_backward", "up", up, gate);
  check_same("swiglu_backward", "grad_y", grad_y, gate);
  if (common_device("swiglu_backward", {&grad_y, &gate, &up}).is_cpu()) return cpu::swiglu_backward(grad_y, gate, up);
#ifdef FATHOM_WITH_CUDA
  return cuda::swiglu_backward(grad_y, gate, up);
#else
  no_cuda_kernel("swiglu_backward");
#endif
}

Tensor silu_forward(const Tensor& x) {
  FATHOM_CHECK(x.defined(), "silu: undefined input");
  if (x.device().is_cpu()) return cpu::silu_forward(x);
#ifdef FATHOM_WITH_CUDA
  return cuda::silu_forward(x);
#else
  no_cuda_kernel("silu");
#endif
}

Tensor silu_backward(const Tensor& grad_y, const Tensor& x) {
  check_same("silu_backward", "grad_y", grad_y, x);
  if (common_device("silu_backward", {&grad_y, &x}).is_cpu()) return cpu::silu_backward(grad_y, x);
#ifdef FATHOM_WITH_CUDA
  return cuda::silu_backward(grad_y, x);
#else
  no_cuda_kernel("silu_backward");
#endif
}

}  // namespace fathom

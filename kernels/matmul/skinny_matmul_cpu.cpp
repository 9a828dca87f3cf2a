// The CPU side of the skinny GEMM is the CPU matmul itself, on the f32 values of the BF16 operands:
// the one reference the GPU kernel (and cuBLASLt) are tested against.
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/skinny_matmul.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/swiglu/swiglu.h"

namespace fathom::cpu {

void skinny_matmul(const Tensor& x, const Tensor& w, Tensor& y) {
  const Tensor x32 = x.to(DType::f32), w32 = w.to(DType::f32);
  if (y.dtype() == DType::f32) return cpu::matmul(x32, false, w32, true, y, 1.0, 0.0);
  Tensor y32 = Tensor::empty(y.shape(), DType::f32);
  cpu::matmul(x32, false, w32, true, y32, 1.0, 0.0);
  y.copy_from(y32.to(y.dtype()));
}

void skinny_matmul_grouped(const Tensor& x, std::span<const Tensor> ws, std::span<Tensor> ys) {
  for (size_t i = 0; i < ws.size(); ++i) cpu::skinny_matmul(x, ws[i], ys[i]);
}

void skinny_swiglu(const Tensor& x, const Tensor& gate, const Tensor& up, Tensor& y) {
  Tensor g = Tensor::empty(y.shape(), y.dtype()), u = Tensor::empty(y.shape(), y.dtype());
  cpu::skinny_matmul(x, gate, g);
  cpu::skinny_matmul(x, up, u);
  // The products rounded to y's dtype as the GPU stores them; SwiGLU computes in f32 and rounds once.
  y.copy_from(cpu::swiglu_forward(g.to(DType::f32), u.to(DType::f32)).to(y.dtype()));
}

namespace {

// The step in f32 on the BF16 values, rounded where the CUDA kernels round (h; pre-norm also the sum before
// its norm): h, and what the next sublayer reads (rounded to BF16).
Tensor residual_step(const ResidualStepInputs& step, Tensor& h) {
  const Tensor r = step.residual.to(DType::f32), x = step.x.to(DType::f32), w = step.weight.to(DType::f32);
  if (step.kind == ResidualStep::post_norm) {
    Tensor in = fathom::rms_norm_forward(x, w, step.eps, r).y.to(DType::bf16);
    h.copy_from(in);
    return in;
  }
  const Tensor sum = fathom::add(r, x).to(DType::bf16);
  h.copy_from(sum);
  return fathom::rms_norm_forward(sum.to(DType::f32), w, step.eps).y.to(DType::bf16);
}

}  // namespace

void skinny_matmul_after_residual_step(const ResidualStepInputs& step, std::span<const Tensor> ws, std::span<Tensor> ys,
                                       Tensor& h) {
  cpu::skinny_matmul_grouped(residual_step(step, h), ws, ys);
}

void skinny_swiglu_after_residual_step(const ResidualStepInputs& step, const Tensor& gate, const Tensor& up, Tensor& y,
                                       Tensor& h) {
  cpu::skinny_swiglu(residual_step(step, h), gate, up, y);
}

}  // namespace fathom::cpu

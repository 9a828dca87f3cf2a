// CUDA gates of DSLA against the CPU reference: bf16 and f32 projections, ragged and unaligned rows.
#include "autograd/engine.h"
#include "autograd/ops.h"
#include "kernels/dsla/gates.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuGates, LogSigmoidGateMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16})
    for (Shape shape : {Shape{1, 1}, Shape{3, 7}, Shape{65, 129}, Shape{2, 2048, 768}}) {
      const std::string what = std::string(dtype_name(dt)) + shape.str();
      const int64_t n = shape.last();
      GpuInput z = random_input(shape, dt, 1, -40, 40), b = random_input({n}, DType::f32, 2, -2, 2);
      GpuInput dg = random_input(shape, DType::f32, 3);
      const Tensor g = log_sigmoid_gate_forward(z.gpu, b.gpu, 1.0 / 16);
      ASSERT_EQ(g.dtype(), DType::f32) << what;
      const Tensor want = log_sigmoid_gate_forward(z.cpu, b.cpu, 1.0 / 16);
      // The gates are fp32 from identical inputs whatever z's dtype: f32 agreement.
      EXPECT_GPU_CLOSE(g, want, DType::f32, what + " g");
      EXPECT_GPU_CLOSE(log_sigmoid_gate_backward(dg.gpu, g, 1.0 / 16),
                       log_sigmoid_gate_backward(dg.cpu, want, 1.0 / 16), DType::f32, what + " du");
    }
}

TEST(GpuGates, UnalignedViewsAndTheBiasGradient) {
  FATHOM_REQUIRE_GPU();
  GpuInput z = random_input({101, 3, 5}, DType::bf16, 4, -6, 6), b = random_input({5}, DType::f32, 5);
  const Tensor zg = z.gpu.narrow(1, 99), zc = z.cpu.narrow(1, 99);
  EXPECT_GPU_CLOSE(log_sigmoid_gate_forward(zg, b.gpu, 0.5), log_sigmoid_gate_forward(zc, b.cpu, 0.5), DType::f32,
                   "views");
  // Through the autograd op: dz in z's dtype, the bias's fp32 gradient summed over rows.
  Variable zv(zg.clone(), true), bv(b.gpu.clone(), true), zcv(zc.clone(), true), bcv(b.cpu.clone(), true);
  GpuInput dg = random_input({99, 3, 5}, DType::f32, 6);
  backward(log_sigmoid_gate(zv, bv, 0.5), dg.gpu);
  backward(log_sigmoid_gate(zcv, bcv, 0.5), dg.cpu);
  EXPECT_EQ(zv.grad().dtype(), DType::bf16);
  EXPECT_GPU_CLOSE(zv.grad(), zcv.grad(), DType::bf16, "dz");
  EXPECT_GPU_CLOSE(bv.grad(), bcv.grad(), DType::f32, "dbias");
}

TEST(GpuGates, SigmoidExpandMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 32}, {32, 32}, {3, 300}, {1, 1}}) {
    GpuInput c = random_input({m}, DType::f32, 7, -4, 4), dy = random_input({n}, DType::f32, 8);
    const Tensor y = sigmoid_expand_forward(c.gpu, n), want = sigmoid_expand_forward(c.cpu, n);
    EXPECT_GPU_CLOSE(y, want, DType::f32, "y");
    EXPECT_GPU_CLOSE(sigmoid_expand_backward(dy.gpu, y, m), sigmoid_expand_backward(dy.cpu, want, m), DType::f32, "dc");
  }
}

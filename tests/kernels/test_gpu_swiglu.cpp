// CUDA SwiGLU forward and backward against the CPU reference.
#include "kernels/swiglu/swiglu.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuSwiglu, ForwardAndBackwardMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16})
    for (Shape shape : {Shape{1}, Shape{3, 7}, Shape{5, 1031}, Shape{64, 2816}}) {
      const std::string what = std::string(dtype_name(dt)) + shape.str();
      GpuInput g = random_input(shape, dt, 1, -6, 6), u = random_input(shape, dt, 2), dy = random_input(shape, dt, 3);
      const Tensor y = swiglu_forward(g.gpu, u.gpu);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_GPU_CLOSE(y, swiglu_forward(g.cpu, u.cpu), dt, what + " y");
      const SwigluGrads got = swiglu_backward(dy.gpu, g.gpu, u.gpu);
      const SwigluGrads want = swiglu_backward(dy.cpu, g.cpu, u.cpu);
      EXPECT_GPU_CLOSE(got.dgate, want.dgate, dt, what + " dgate");
      EXPECT_GPU_CLOSE(got.dup, want.dup, dt, what + " dup");
    }
}

TEST(GpuSwiglu, UnalignedViews) {
  FATHOM_REQUIRE_GPU();
  GpuInput g = random_input({101, 3}, DType::f32, 4), u = random_input({101, 3}, DType::f32, 5);
  EXPECT_GPU_CLOSE(swiglu_forward(g.gpu.narrow(1, 99), u.gpu.narrow(2, 99)),
                   swiglu_forward(g.cpu.narrow(1, 99), u.cpu.narrow(2, 99)), DType::f32, "views");
}

// CUDA rotary embedding against the CPU reference: head dims 64, 128 and an odd half (6), positions
// shared by the batch or per row, large positions (angles computed in double); token counts that give
// each thread every head (4096 tokens), a few heads, or one (a decoding step's 32 tokens of 16 heads).
#include "kernels/rope/rope.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuRope, ForwardAndBackwardMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  const Shape shapes[] = {{2, 37, 3, 64},    {1, 129, 4, 128}, {3, 5, 2, 6},
                          {2, 2048, 4, 128}, {32, 1, 16, 128}, {3, 1, 5, 64}};
  for (DType dt : {DType::f32, DType::bf16})
    for (const Shape& shape : shapes)
      for (bool per_row : {false, true}) {
        const std::string what = std::string(dtype_name(dt)) + shape.str() + (per_row ? " per-row" : " shared");
        const Tensor pos = per_row ? random_ints({shape[0], shape[1]}, 100000, 7, DType::i32)
                                   : random_ints({shape[1]}, 4096, 8, DType::i64);
        GpuInput x = random_input(shape, dt, 1), g = random_input(shape, dt, 2);
        EXPECT_GPU_CLOSE(rope_forward(x.gpu, pos.to(kGpu), 500000.0), rope_forward(x.cpu, pos, 500000.0), dt,
                         what + " forward");
        EXPECT_GPU_CLOSE(rope_backward(g.gpu, pos.to(kGpu), 10000.0), rope_backward(g.cpu, pos, 10000.0), dt,
                         what + " backward");
      }
}

TEST(GpuRope, BackwardUndoesForward) {
  FATHOM_REQUIRE_GPU();
  GpuInput x = random_input({2, 64, 8, 128}, DType::f32, 3);
  const Tensor pos = random_ints({64}, 8192, 9).to(kGpu);
  EXPECT_GPU_CLOSE(rope_backward(rope_forward(x.gpu, pos, 10000.0), pos, 10000.0), x.cpu, DType::f32, "round trip");
}

TEST(GpuRope, ANegativePositionIsReported) {
  FATHOM_REQUIRE_GPU();
  GpuInput x = random_input({1, 3, 1, 8}, DType::f32, 4);
  const Tensor pos = Tensor::from_vector<int64_t>({0, -5, 2}, {3}).to(kGpu);
  expect_error([&] { rope_forward(x.gpu, pos, 10000.0).to(Device::cpu()); }, {"rope", "position -5", "index 1"});
}

// One table serves tensors of different head counts (q and GQA's k) and both directions, as the layers
// of a forward share it: the same outputs as a table made for each call, bit for bit.
TEST(GpuRope, OneAnglesTableServesEveryRotation) {
  FATHOM_REQUIRE_GPU();
  const Tensor pos = random_ints({4, 3}, 100000, 10, DType::i32).to(kGpu);
  const Tensor angles = rope_angles(pos, 64, 500000.0, {"llama3", 8.0, 1.0, 4.0, 8192});
  EXPECT_EQ(angles.shape(), (Shape{4, 3, 32, 2}));
  EXPECT_EQ(angles.dtype(), DType::f32);
  for (int64_t heads : {8, 2}) {
    GpuInput x = random_input({4, 3, heads, 64}, DType::bf16, 11 + heads);
    const RopeScaling scaling{"llama3", 8.0, 1.0, 4.0, 8192};
    EXPECT_TRUE(bitwise_equal(rope_forward(x.gpu, angles), rope_forward(x.gpu, pos, 500000.0, scaling)));
    EXPECT_TRUE(bitwise_equal(rope_backward(x.gpu, angles), rope_backward(x.gpu, pos, 500000.0, scaling)));
    EXPECT_GPU_CLOSE(rope_forward(x.gpu, angles), rope_forward(x.cpu, pos.to(Device::cpu()), 500000.0, scaling),
                     DType::bf16, "heads " + std::to_string(heads));
  }
}

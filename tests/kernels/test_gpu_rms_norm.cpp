// CUDA RMSNorm, full-width and per-head, against the CPU reference: narrow rows (one warp each),
// register rows, wide ones and fewer rows than the H200's 132 SMs (one block each), widths that are and are not
// multiples of the pack, row counts that are not multiples of anything; plus a bit-identical weight gradient across
// runs.
#include <string>

#include "kernels/elementwise/elementwise.h"
#include "kernels/rms_norm/rms_norm.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuRmsNorm, ForwardAndBackwardMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  const Shape shapes[] = {
      {3, 5, 64},       // per-head, d = 64
      {2, 37, 6, 128},  // per-head [B, T, H, d], d = 128
      {301, 77},        // odd width, warp rows, unpacked
      {229, 1000},      // register rows (bf16: 125 packs of 8), f32 warp rows
      {167, 2048},      // register rows (bf16), f32 block rows
      {145, 768},       // register rows, 96 packs of a lane's 128 slots (bf16)
      {170, 520},       // register rows (bf16: 65 packs), f32 warp rows
      {3, 384},         // fewer rows than SMs: a block per row (bf16)
      {32, 2048},       // a decoding batch's rows: a block per row (bf16)
      {67, 520},        // fewer rows than SMs, 65 packs
      {33, 4100},       // wide, packed, not a power of two
      {19, 3001},       // wide, odd
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (const Shape& shape : shapes) {
      const std::string what = std::string(dtype_name(dt)) + shape.str();
      const int64_t n = shape.last();
      GpuInput x = random_input(shape, dt, 1, -2, 2), w = random_input({n}, dt, 2, 0.5, 1.5),
               g = random_input(shape, dt, 3);
      const RmsNormOutput got = rms_norm_forward(x.gpu, w.gpu, 1e-6);
      const RmsNormOutput want = rms_norm_forward(x.cpu, w.cpu, 1e-6);
      EXPECT_EQ(got.rstd.dtype(), DType::f32) << what;  // f32 statistics for bf16 activations too
      EXPECT_EQ(got.y.dtype(), dt) << what;
      EXPECT_GPU_CLOSE(got.y, want.y, dt, what + " y");
      EXPECT_GPU_CLOSE(got.rstd, want.rstd, DType::f32, what + " rstd");
      const RmsNormGrads gg = rms_norm_backward(g.gpu, x.gpu, w.gpu, got.rstd);
      const RmsNormGrads gw = rms_norm_backward(g.cpu, x.cpu, w.cpu, want.rstd);
      EXPECT_GPU_CLOSE(gg.dx, gw.dx, dt, what + " dx");
      EXPECT_GPU_CLOSE(gg.dweight, gw.dweight, dt, what + " dweight");
      // The residual form (the post-norm block's add in the same pass).
      const GpuInput residual = random_input(shape, dt, 4);
      const RmsNormOutput got_r = rms_norm_forward(x.gpu, w.gpu, 1e-6, residual.gpu);
      const RmsNormOutput want_r = rms_norm_forward(x.cpu, w.cpu, 1e-6, residual.cpu);
      EXPECT_GPU_CLOSE(got_r.y, want_r.y, dt, what + " residual + y");
      EXPECT_TRUE(bitwise_equal(got_r.rstd, got.rstd)) << what;
    }
}

TEST(GpuRmsNorm, WeightGradientIsBitIdenticalAcrossRuns) {
  FATHOM_REQUIRE_GPU();
  for (Shape shape : {Shape{4096, 128}, Shape{1500, 2048}}) {
    GpuInput x = random_input(shape, DType::bf16, 4), w = random_input({shape.last()}, DType::bf16, 5),
             g = random_input(shape, DType::bf16, 6);
    const RmsNormOutput out = rms_norm_forward(x.gpu, w.gpu, 1e-5);
    const RmsNormGrads first = rms_norm_backward(g.gpu, x.gpu, w.gpu, out.rstd);
    for (int i = 0; i < 3; ++i) {
      const RmsNormGrads again = rms_norm_backward(g.gpu, x.gpu, w.gpu, out.rstd);
      EXPECT_TRUE(bitwise_equal(again.dweight, first.dweight)) << shape.str();
      EXPECT_TRUE(bitwise_equal(again.dx, first.dx)) << shape.str();
    }
  }
}

TEST(GpuRmsNorm, RejectsAnF64OnTheGpuAndAMismatchedRstd) {
  FATHOM_REQUIRE_GPU();
  const Tensor x = random_tensor({4, 8}, DType::f64, 1).to(kGpu), w = random_tensor({8}, DType::f64, 2).to(kGpu);
  expect_error([&] { rms_norm_forward(x, w, 1e-6); }, {"rms_norm", "F32 or BF16", "F64"});
  GpuInput xb = random_input({4, 8}, DType::bf16, 3), wb = random_input({8}, DType::bf16, 4);
  const Tensor bf16_rstd = Tensor::zeros({4}, DType::bf16, kGpu);
  expect_error([&] { rms_norm_backward(xb.gpu, xb.gpu, wb.gpu, bf16_rstd); }, {"rstd", "F32[4]"});
}

// The pre-norm residual step in one pass against the CPU and against the CUDA add then rms_norm: the sum
// bit for bit (the same rounding), the norm up to the order of the f32 sum of squares.
TEST(GpuRmsNorm, AddThenNormMatchesTheCpuAndTheSeparateOps) {
  FATHOM_REQUIRE_GPU();
  for (const DType dt : {DType::f32, DType::bf16})
    for (const Shape& shape : {Shape{1, 2048}, Shape{32, 1, 2048}, Shape{3, 7, 100}, Shape{513, 264}}) {
      const std::string what = std::string(dtype_name(dt)) + shape.str();
      const GpuInput r = random_input(shape, dt, 1), x = random_input(shape, dt, 2);
      const GpuInput w = random_input({shape.last()}, dt, 3);
      const AddRmsNormOutput got = add_rms_norm_forward(r.gpu, x.gpu, w.gpu, 1e-5);
      const AddRmsNormOutput want = add_rms_norm_forward(r.cpu, x.cpu, w.cpu, 1e-5);
      EXPECT_GPU_CLOSE(got.sum, want.sum, dt, what + ": sum");
      EXPECT_GPU_CLOSE(got.normed.y, want.normed.y, dt, what + ": y");
      const Tensor sum = add(r.gpu, x.gpu);
      EXPECT_TRUE(bitwise_equal(got.sum, sum)) << what << ": sum against add";
      EXPECT_LE(relative_l2(got.normed.y, rms_norm_forward(sum, w.gpu, 1e-5).y), 5e-4) << what << ": y";
    }
}

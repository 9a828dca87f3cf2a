// cuBLASLt GEMMs against the CPU reference: every transpose combination, awkward sizes, alpha/beta
// accumulation, bf16 operands with f32 accumulation, and operands at unaligned offsets.
#include <limits>

#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
struct GemmShape {
  int64_t m, n, k;
};
const GemmShape kShapes[] = {{1, 1, 1}, {17, 33, 65}, {128, 64, 256}, {257, 131, 77}, {1000, 3, 513}, {3, 1000, 9}};
}  // namespace

TEST(GpuMatmul, EveryTransposeMatchesTheCpu) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (const GemmShape& s : kShapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const std::string what = std::string(dtype_name(dt)) + " m=" + std::to_string(s.m) +
                                   " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + (ta ? " aT" : "") +
                                   (tb ? " bT" : "");
          GpuInput a = random_input(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, dt, seed++);
          GpuInput b = random_input(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, dt, seed++);
          const Tensor got = matmul(a.gpu, ta, b.gpu, tb);
          EXPECT_EQ(got.shape(), Shape({s.m, s.n})) << what;
          EXPECT_EQ(got.dtype(), dt) << what;
          EXPECT_GPU_CLOSE(got, matmul(a.cpu, ta, b.cpu, tb), dt, what);
        }
}

TEST(GpuMatmul, AlphaBetaAccumulateAndBetaZeroIgnoresTheOldOutput) {
  FATHOM_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    GpuInput a = random_input({96, 40}, dt, 1), b = random_input({72, 40}, dt, 2), c = random_input({96, 72}, dt, 3);
    Tensor got = c.gpu.clone();
    matmul(a.gpu, false, b.gpu, true, got, 0.5, -2.0);
    Tensor want = c.cpu.clone();
    cpu::matmul(a.cpu, false, b.cpu, true, want, 0.5, -2.0);
    EXPECT_GPU_CLOSE(got, want, dt, std::string(dtype_name(dt)) + " alpha/beta");
    // beta = 0 overwrites, even NaN.
    Tensor nan = Tensor::full({96, 72}, std::numeric_limits<double>::quiet_NaN(), dt, kGpu);
    matmul(a.gpu, false, b.gpu, true, nan, 1.0, 0.0);
    EXPECT_GPU_CLOSE(nan, matmul(a.cpu, false, b.cpu, true), dt, std::string(dtype_name(dt)) + " beta=0 over NaN");
  }
}

TEST(GpuMatmul, OperandsAtUnalignedOffsetsAndEmptyInnerDimension) {
  FATHOM_REQUIRE_GPU();
  // Rows 1.. of a [65, 33] matrix start 33 elements in: not 16-byte aligned.
  GpuInput a = random_input({65, 33}, DType::f32, 7), b = random_input({33, 19}, DType::f32, 8);
  EXPECT_GPU_CLOSE(matmul(a.gpu.narrow(1, 64), false, b.gpu, false), matmul(a.cpu.narrow(1, 64), false, b.cpu, false),
                   DType::f32, "unaligned a");
  GpuInput ab = random_input({65, 33}, DType::bf16, 9), bb = random_input({33, 19}, DType::bf16, 10);
  EXPECT_GPU_CLOSE(matmul(ab.gpu.narrow(1, 64), false, bb.gpu, false),
                   matmul(ab.cpu.narrow(1, 64), false, bb.cpu, false), DType::bf16, "unaligned bf16 a");
  // k = 0: C = beta C.
  GpuInput c = random_input({4, 5}, DType::f32, 11);
  Tensor got = c.gpu.clone();
  matmul(Tensor::empty({4, 0}, DType::f32, kGpu), false, Tensor::empty({0, 5}, DType::f32, kGpu), false, got, 1.0, 2.0);
  Tensor want = c.cpu.clone();
  cpu::scale_inplace(want, 2.0);
  EXPECT_GPU_CLOSE(got, want, DType::f32, "k=0");
}

// CUDA elementwise ops and reductions against the CPU reference, in f32 and bf16, on lengths that
// leave ragged tails and on views whose start is not aligned to a pack.
#include <cmath>
#include <limits>

#include "kernels/elementwise/elementwise.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {
const int64_t kLengths[] = {1, 7, 1000, 65537, (int64_t(1) << 20) + 3};
}  // namespace

TEST(GpuElementwise, AddAxpyAndScaleMatchTheCpu) {
  FATHOM_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t n : kLengths) {
      const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
      GpuInput a = random_input({n}, dt, 1), b = random_input({n}, dt, 2);
      // add
      EXPECT_GPU_CLOSE(add(a.gpu, b.gpu), cpu::add(a.cpu, b.cpu), dt, what + " add");
      // axpy and add_inplace
      Tensor d = a.gpu.clone();
      Tensor want = a.cpu.clone();
      axpy_inplace(d, -0.75, b.gpu);
      cpu::axpy_inplace(want, -0.75, b.cpu);
      EXPECT_GPU_CLOSE(d, want, dt, what + " axpy");
      add_inplace(d, b.gpu);
      cpu::add_inplace(want, b.cpu);
      EXPECT_GPU_CLOSE(d, want, dt, what + " add_inplace");
      scale_inplace(d, 3.5);
      cpu::scale_inplace(want, 3.5);
      EXPECT_GPU_CLOSE(d, want, dt, what + " scale");
    }
}

TEST(GpuElementwise, UnalignedViewsAndMixedPrecisionAccumulation) {
  FATHOM_REQUIRE_GPU();
  // Views starting one element in: the packed path must not be taken.
  GpuInput a = random_input({1001}, DType::f32, 3), b = random_input({1001}, DType::f32, 4);
  Tensor d = a.gpu.clone();
  Tensor dv = d.narrow(1, 999);
  axpy_inplace(dv, 2.0, b.gpu.narrow(2, 999));
  Tensor want = a.cpu.clone();
  Tensor wv = want.narrow(1, 999);
  cpu::axpy_inplace(wv, 2.0, b.cpu.narrow(2, 999));
  EXPECT_GPU_CLOSE(d, want, DType::f32, "unaligned axpy");
  // An F32 destination accumulates a BF16 source (bf16 grads into the f32 arena) exactly as f32 math.
  GpuInput g = random_input({4099}, DType::bf16, 5);
  Tensor acc = a.gpu.narrow(0, 1000).clone();
  Tensor acc_want = a.cpu.narrow(0, 1000).clone();
  add_inplace(acc, g.gpu.narrow(0, 1000));
  cpu::add_inplace(acc_want, g.cpu.narrow(0, 1000));
  EXPECT_GPU_CLOSE(acc, acc_want, DType::f32, "f32 += bf16");
  // The reverse (bf16 += f32) and mismatched dtypes on the CPU stay errors.
  Tensor bf = g.gpu.narrow(0, 1000);
  expect_error([&] { add_inplace(bf, acc); }, {"add_inplace", "differ in shape or dtype"});
  Tensor host = a.cpu.narrow(0, 10).clone();
  expect_error([&] { add_inplace(host, g.cpu.narrow(0, 10).to(DType::bf16)); }, {"add_inplace"});
}

TEST(GpuElementwise, ReductionsMatchTheCpuAndRepeatBitForBit) {
  FATHOM_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t n : kLengths) {
      const std::string what = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
      GpuInput a = random_input({n}, dt, 11, -2, 3);
      const double ss = sum_squares(a.gpu), s = sum(a.gpu);
      EXPECT_NEAR(ss, cpu::sum_squares(a.cpu), 1e-12 * cpu::sum_squares(a.cpu) + 1e-12) << what;
      EXPECT_NEAR(s, cpu::sum(a.cpu), 1e-12 * cpu::sum_squares(a.cpu) + 1e-12) << what;
      // Deterministic: the same bits every time.
      EXPECT_EQ(sum_squares(a.gpu), ss) << what;
      EXPECT_EQ(sum(a.gpu), s) << what;
      EXPECT_TRUE(all_finite(a.gpu)) << what;
      // Unaligned view.
      if (n > 2) {
        EXPECT_NEAR(sum_squares(a.gpu.narrow(1, n - 2)), cpu::sum_squares(a.cpu.narrow(1, n - 2)),
                    1e-12 * cpu::sum_squares(a.cpu) + 1e-12)
            << what;
      }
    }
}

TEST(GpuElementwise, AllFiniteFindsNanAndInfAnywhere) {
  FATHOM_REQUIRE_GPU();
  const int64_t n = 100003;
  for (int64_t at : {int64_t(0), int64_t(5), n / 2, n - 1})
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      Tensor t = random_tensor({n}, DType::f32, 2);
      t.data<float>()[at] = bad;
      EXPECT_FALSE(all_finite(t.to(kGpu))) << at << " " << bad;
      EXPECT_FALSE(all_finite(t.to(kGpu).to(DType::bf16))) << at << " " << bad;
    }
  EXPECT_TRUE(all_finite(Tensor::empty({0}, DType::f32, kGpu)));
  EXPECT_EQ(sum(Tensor::empty({0}, DType::f32, kGpu)), 0.0);
}

TEST(GpuElementwise, GradNormOfALargeArenaIsDeterministic) {
  FATHOM_REQUIRE_GPU();
  // A 50M-element gradient arena: the norm used for clipping repeats exactly across runs, and
  // scaling by the clip factor matches the CPU.
  const int64_t n = 50'000'017;
  Tensor grads = random_tensor({n}, DType::f32, 21, -1e-2, 1e-2);
  Tensor g = grads.to(kGpu);
  const double first = sum_squares(g);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sum_squares(g), first);
  EXPECT_NEAR(first, cpu::sum_squares(grads), 1e-10 * first);
  const double factor = 0.5 / std::sqrt(first);
  scale_inplace(g, factor);
  EXPECT_NEAR(std::sqrt(sum_squares(g)), 0.5, 1e-6);
}

// train.precision fp8 on the GPU: a tiny OLMo2 (every linear in FP8 through cuBLASLt) trains 20 steps
// along the bf16 curve, and along the CPU's FP8 emulation of the same run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/support/gpu_test_util.h"
#include "tests/support/test_support.h"
#include "tests/support/training_losses.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuFp8Training, TwentyStepsFollowTheBf16AndEmulatedCurves) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::string model =
      "model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n";
  const std::vector<double> bf16 = tiny_training_losses(dir / "bf16", "cuda", model, 20, "bf16");
  const std::vector<double> fp8 = tiny_training_losses(dir / "fp8", "cuda", model, 20, "fp8");
  const std::vector<double> emulated = tiny_training_losses(dir / "cpu", "cpu", model, 20, "fp8");
  ASSERT_EQ(fp8.size(), 20u);
  double worst_bf16 = 0, worst_cpu = 0;
  for (size_t i = 0; i < fp8.size(); ++i) {
    EXPECT_NEAR(fp8[i], bf16[i], 0.03 * bf16[i]) << "step " << i + 1;
    EXPECT_NEAR(fp8[i], emulated[i], 0.03 * emulated[i]) << "step " << i + 1;
    worst_bf16 = std::max(worst_bf16, std::abs(fp8[i] - bf16[i]) / bf16[i]);
    worst_cpu = std::max(worst_cpu, std::abs(fp8[i] - emulated[i]) / emulated[i]);
  }
  std::printf("fp8 on the GPU: largest relative loss difference to bf16 %.2e, to the CPU emulation %.2e\n", worst_bf16,
              worst_cpu);
  EXPECT_LT(fp8.back(), fp8.front() - 0.5);
}

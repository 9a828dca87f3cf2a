// A tiny OLMo2 trained 20 steps on the GPU and on the CPU from the same init and data: the loss
// curves agree within bf16 tolerance, under bf16 mixed precision (bf16 weights and activations) and
// under train.precision: fp32 (where only the flash attention kernel rounds to bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/training_losses.h"
#include "tests/unit/test_support.h"

using namespace fathom;

TEST(GpuTraining, TwentyStepsMatchTheCpuLossCurve) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::string model = "model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n";
  const std::vector<double> cpu = test::tiny_training_losses(dir / "cpu", "cpu", model);
  ASSERT_EQ(cpu.size(), 20u);
  for (const std::string precision : {"bf16", "fp32"}) {
    const std::vector<double> gpu = test::tiny_training_losses(dir / ("gpu-" + precision), "cuda", model, 20, precision);
    ASSERT_EQ(gpu.size(), 20u);
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_NEAR(gpu[i], cpu[i], 2e-2 * cpu[i]) << precision << " step " << i + 1;
      worst = std::max(worst, std::abs(gpu[i] - cpu[i]) / cpu[i]);
    }
    std::printf("%s: largest relative loss difference to the CPU over 20 steps: %.2e\n", precision.c_str(), worst);
    EXPECT_LT(gpu.back(), gpu.front() - 0.5) << precision;
  }
}

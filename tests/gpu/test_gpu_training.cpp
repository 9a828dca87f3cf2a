// A tiny OLMo2 trained 20 steps on the GPU and on the CPU from the same init and data: the loss
// curves agree within bf16 tolerance (the GPU attention computes in bf16).
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/training_losses.h"
#include "tests/unit/test_support.h"

using namespace fathom;

TEST(GpuTraining, TwentyStepsMatchTheCpuLossCurve) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::string model = "model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n";
  const std::vector<double> cpu = test::tiny_training_losses(dir / "cpu", "cpu", model);
  const std::vector<double> gpu = test::tiny_training_losses(dir / "gpu", "cuda", model);
  ASSERT_EQ(cpu.size(), 20u);
  ASSERT_EQ(gpu.size(), 20u);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-2 * cpu[i]) << "step " << i + 1;
  EXPECT_LT(gpu.back(), gpu.front() - 0.5);
}

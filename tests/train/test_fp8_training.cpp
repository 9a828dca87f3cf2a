// train.precision fp8 on the CPU (the FP8 emulation): a tiny OLMo2 trained 40 steps follows the fp32
// loss curve closely, and the run says it emulates. Resume bit-exactness in fp8 is one of
// tests/integration/test_train.cpp's ResumeFromAMidRunCheckpoint cases.
//
// The bound: the emulation rounds every linear's operands to e4m3 (relative error up to 2^-4) and the
// gradients to e5m2 (up to 2^-3), independently per element and unbiased, so per-step losses differ from
// fp32 by noise of a few parts in a thousand that does not grow over a short run: the test allows 2%
// of the loss at every step (the curves start at ln 264 = 5.6 and fall by about 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/support/test_support.h"
#include "tests/support/training_losses.h"
#include "train/recipe/recipe.h"

using namespace fathom;

TEST(Fp8Training, CpuEmulationFollowsTheFp32LossCurve) {
  fathom::testing::ScratchFolder dir;
  const std::string model =
      "model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n";
  const std::vector<double> fp32 = test::tiny_training_losses(dir / "fp32", "cpu", model, 40, "fp32");
  const std::vector<double> fp8 = test::tiny_training_losses(dir / "fp8", "cpu", model, 40, "fp8");
  ASSERT_EQ(fp32.size(), 40u);
  ASSERT_EQ(fp8.size(), 40u);
  double worst = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    EXPECT_NEAR(fp8[i], fp32[i], 0.02 * fp32[i]) << "step " << i + 1;
    worst = std::max(worst, std::abs(fp8[i] - fp32[i]) / fp32[i]);
  }
  EXPECT_GT(worst, 0.0) << "the emulation really rounds";
  EXPECT_LT(fp8.back(), fp8.front() - 1.0);
  std::printf("fp8 emulation against fp32: largest relative loss difference over 40 steps %.2e\n", worst);
}

TEST(Fp8Training, RecipeChoicesNameFp8) {
  const std::string recipe =
      "name: x\nmodel: {size: olmo2_14M}\ndata: {tokenizer: bytes, train: [x]}\n"
      "train: {steps: 1, precision: fp4}\n";
  fathom::testing::expect_error([&] { parse_recipe(recipe, "r.yaml"); },
                                {"train.precision must be one of fp32, bf16, fp8", "fp4"});
}

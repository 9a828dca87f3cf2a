// A tiny OLMo2 on the GPU against the CPU from the same init and data: 20 training steps, whose loss
// curves agree within bf16 tolerance under bf16 mixed precision (bf16 weights and activations) and
// far closer under train.precision: fp32; and, all in fp32, one forward and backward whose logits and
// gradients agree to fp32 rounding (no op, attention included, rounds to bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/support/gpu_test_util.h"
#include "tests/support/model_step.h"
#include "tests/support/test_support.h"
#include "tests/support/training_losses.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuTraining, TwentyStepsMatchTheCpuLossCurve) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::string model =
      "model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n";
  const std::vector<double> cpu = test::tiny_training_losses(dir / "cpu", "cpu", model);
  ASSERT_EQ(cpu.size(), 20u);
  for (const std::string precision : {"bf16", "fp32"}) {
    const std::vector<double> gpu =
        test::tiny_training_losses(dir / ("gpu-" + precision), "cuda", model, 20, precision);
    ASSERT_EQ(gpu.size(), 20u);
    // fp32 differs from the CPU only in the order of its sums; bf16 rounds every activation.
    const double tolerance = precision == "fp32" ? 1e-3 : 2e-2;
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_NEAR(gpu[i], cpu[i], tolerance * cpu[i]) << precision << " step " << i + 1;
      worst = std::max(worst, std::abs(gpu[i] - cpu[i]) / cpu[i]);
    }
    std::printf("%s: largest relative loss difference to the CPU over 20 steps: %.2e\n", precision.c_str(), worst);
    EXPECT_LT(gpu.back(), gpu.front() - 0.5) << precision;
  }
}

// train.precision: fp32 on the GPU computes in fp32 throughout: one forward and backward of a tiny
// OLMo2 (head dim 80 and G = 3, so the fp32 attention kernels see a partial column group and shared
// KV heads; T = 45 ends inside a tile) gives the CPU's logits within 1e-5 and every parameter's
// gradient within 1e-4 relative L2 (sums over the batch's 90 tokens, in another order). Attention
// rounded to bf16 anywhere would be off by about 1e-3.
TEST(GpuTraining, Fp32StepMatchesTheCpuToFp32Rounding) {
  FATHOM_REQUIRE_GPU();
  const ModelConfig config{
      .d_model = 240, .n_layers = 2, .n_heads = 3, .n_kv_heads = 1, .ffn_hidden = 128, .vocab_size = 96};
  const int64_t B = 2, T = 45;
  const Tensor ids = token_ids(B, T, config.vocab_size, 1), targets = token_ids(B, T, config.vocab_size, 2);
  const StepResult cpu = forward_backward(config, ids, targets, Device::cpu());
  const StepResult gpu = forward_backward(config, ids, targets, kGpu);
  EXPECT_LE(relative_l2(gpu.logits, cpu.logits), 1e-5) << "logits";
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss) << "loss";
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    ASSERT_EQ(gpu.grads[i].second.dtype(), DType::f32) << cpu.grads[i].first;
    const double err = relative_l2(gpu.grads[i].second, cpu.grads[i].second);
    EXPECT_LE(err, 1e-4) << "gradient of " << cpu.grads[i].first;
    worst = std::max(worst, err);
  }
  std::printf("fp32 step: largest relative L2 gradient difference to the CPU: %.2e\n", worst);
}

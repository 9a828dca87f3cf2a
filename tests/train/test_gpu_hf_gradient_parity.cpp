// HF parity of the training side on the GPU: loss and every parameter's gradient of the tiny random
// Olmo2ForCausalLM fixture through the trainer's forward/loss/backward on CUDA against transformers'
// fp32 values. The tolerance (relative L2 2e-2) holds whether the GPU model computes in f32 or in bf16
// mixed precision; the gradients are compared in whatever dtype the arena keeps them.
#include <gtest/gtest.h>

#include "tests/integration/hf_gradient_parity.h"
#include "tests/support/gpu_test_util.h"

using namespace fathom;
using namespace fathom::test;

TEST(GpuHfGradientParity, Olmo2LossAndGradientsMatchTransformers) {
  FATHOM_REQUIRE_GPU();
  const HfGradientFixture f = load_hf_gradient_fixture("olmo2");
  const FathomGradients got = fathom_loss_and_gradients(f, hf_shifted_batch(f.ids), kGpu);
  expect_gradients_match(got, f, 2e-2);
}

// HF parity of the training side on the CPU in fp32: the tiny random Olmo2ForCausalLM saved by
// transformers (GQA, odd sizes) gives the same loss and the same gradient for every parameter through
// the trainer's forward/loss/backward as through transformers' loss.backward().
#include <gtest/gtest.h>

#include "tests/integration/hf_gradient_parity.h"

using namespace fathom;
using namespace fathom::test;

TEST(HfGradientParity, Olmo2LossAndGradientsMatchTransformersOnCpu) {
  const HfGradientFixture f = load_hf_gradient_fixture("olmo2");
  ASSERT_EQ(f.grads.size(), f.model.weights.size());
  const FathomGradients got = fathom_loss_and_gradients(f, hf_shifted_batch(f.ids), Device::cpu());
  expect_gradients_match(got, f, 1e-4);
}

// The comparison is sharp enough to see a wrong target alignment: unshifted labels give another loss.
TEST(HfGradientParity, UnshiftedTargetsGiveAnotherLoss) {
  const HfGradientFixture f = load_hf_gradient_fixture("olmo2");
  const FathomGradients got = fathom_loss_and_gradients(f, TokenBatch{f.ids, f.ids}, Device::cpu());
  EXPECT_GT(std::abs(got.loss - f.loss) / f.loss, 1e-2);
}

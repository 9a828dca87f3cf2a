// The trainer's step (train/run/train_step.h): gradient accumulation averages micro-batches, and bad
// settings, mis-shaped batches and a non-finite loss are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "tests/support/op_test_util.h"
#include "train/measure/memory_plan.h"
#include "train/run/train_step.h"

using namespace fathom;
using namespace fathom::test;

namespace {

ModelConfig tiny_config() {
  return {.d_model = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 24, .vocab_size = 40};
}

TokenBatch random_batch(uint64_t seed) {
  return {random_ints({2, 8}, 40, seed, DType::i32), random_ints({2, 8}, 40, seed + 1, DType::i32)};
}

struct Trained {
  StepResult result;
  Tensor grads;  // as the step left them (unclipped: the clip rides in the optimizer's update)
  std::vector<float> params;
};

// One step from the same init, with `accum` micro-batches that are all `batch`.
Trained one_step(const TokenBatch& batch, int64_t accum) {
  Decoder model(tiny_config());
  ParameterArena arena(model, Device::cpu());
  arena.initialise(5);
  AdamW optimizer(arena, AdamWConfig{});
  const StepSettings settings{
      .step = 1, .lr = 1e-2, .clip = 0.5, .objective = Objective::language_model(1e-4), .grad_accum = accum};
  const StepResult r = train_step(
      model, arena, optimizer, [&] { return batch; }, Device::cpu(), settings);
  return {r, arena.grads().to(DType::f32), arena.values().to_vector<float>()};
}

}  // namespace

// Averaging identical micro-batches must give exactly the step of one of them (up to rounding).
TEST(TrainStep, AccumulatedIdenticalMicroBatchesEqualOneBatch) {
  const TokenBatch batch = random_batch(11);
  const Trained one = one_step(batch, 1), three = one_step(batch, 3);
  EXPECT_NEAR(three.result.loss, one.result.loss, 1e-6 * one.result.loss);
  EXPECT_NEAR(three.result.z_loss, one.result.z_loss, 1e-6 * one.result.z_loss + 1e-12);
  EXPECT_NEAR(three.result.grad_norm, one.result.grad_norm, 1e-5 * one.result.grad_norm);
  EXPECT_GT(one.result.grad_norm, 0.5);                           // so clipping took part
  expect_close(three.grads, one.grads, 2e-8, 1e-4, "gradients");  // f32 sums in another order
  // AdamW's first step is nearly sign(g) * lr, so gradients near zero may round to slightly other
  // updates; a hundredth of a step bounds that.
  ASSERT_EQ(one.params.size(), three.params.size());
  double max_diff = 0;
  for (size_t i = 0; i < one.params.size(); ++i)
    max_diff = std::max(max_diff, double(std::abs(one.params[i] - three.params[i])));
  EXPECT_LT(max_diff, 1e-2 * 1e-2);
}

// The step's head and loss form their gradients in the forward pass, a chunk of rows at a time; the
// parameter gradients are still the plain head and loss's, bit for bit (one chunk here).
TEST(TrainStep, TheHeadAndLossFuseTheirGradient) {
  Decoder model(tiny_config());
  ParameterArena arena(model, Device::cpu());
  arena.initialise(5);
  const TokenBatch batch = random_batch(13);
  const int64_t tokens = batch.targets.numel(), vocab = tiny_config().vocab_size;
  {  // the statements of accumulate_gradients
    const Variable h = reshape(model.forward(batch.inputs).hidden, {tokens, tiny_config().d_model});
    const LossParts loss = linear_cross_entropy(h, model.head_weight(), batch.targets.view({tokens}), 1e-4, 0.5,
                                                loss_chunk_rows(vocab, dtype_size(h.dtype())));
    EXPECT_EQ(std::string(loss.loss.grad_fn()->name()), "linear_cross_entropy");
  }
  arena.zero_grad();
  const MicroBatchLoss fused =
      accumulate_gradients(model, batch, Device::cpu(), Objective::language_model(1e-4), 1.0 / 3);
  const std::vector<double> fused_grads = values(arena.grads());
  arena.zero_grad();
  const Variable kept = reshape(model.logits(batch.inputs), {tokens, vocab});
  const LossParts plain = cross_entropy(kept, batch.targets.view({tokens}), 1e-4);
  backward(scale(plain.loss, 1.0 / 3));
  EXPECT_EQ(fused.ce, plain.ce);
  EXPECT_EQ(fused.z, plain.z);
  EXPECT_EQ(fused_grads, values(arena.grads()));
}

TEST(TrainStep, MoreMicroBatchesOfOtherDataChangeTheStep) {
  Decoder model(tiny_config());
  ParameterArena arena(model, Device::cpu());
  arena.initialise(5);
  AdamW optimizer(arena, AdamWConfig{});
  uint64_t seed = 20;
  const StepResult r = train_step(
      model, arena, optimizer, [&] { return random_batch(seed += 2); }, Device::cpu(),
      StepSettings{.step = 1, .lr = 1e-2, .clip = 1.0, .grad_accum = 2});
  EXPECT_EQ(seed, 24u);  // two micro-batches drawn
  EXPECT_EQ(r.z_loss, 0.0);
  EXPECT_NE(r.loss, one_step(random_batch(22), 1).result.loss);
}

TEST(TrainStep, BadInputsAreClearErrors) {
  Decoder model(tiny_config());
  ParameterArena arena(model, Device::cpu());
  arena.initialise(5);
  AdamW optimizer(arena, AdamWConfig{});
  const TokenBatch good = random_batch(3);
  expect_error(
      [&] {
        train_step(
            model, arena, optimizer, [&] { return good; }, Device::cpu(),
            StepSettings{.step = 1, .lr = 1e-3, .grad_accum = 0});
      },
      {"grad_accum must be at least 1", "0"});
  const TokenBatch uneven{good.inputs, random_ints({2, 7}, 40, 4, DType::i32)};
  expect_error([&] { accumulate_gradients(model, uneven, Device::cpu(), Objective::language_model(0.0), 1.0); },
               {"inputs and targets must both be [B, T]", "[2, 7]"});
}

TEST(TrainStep, NonFiniteLossNamesTheStepAndTheNote) {
  Decoder model(tiny_config());
  ParameterArena arena(model, Device::cpu());
  arena.initialise(5);
  AdamW optimizer(arena, AdamWConfig{});
  const std::vector<float> before = arena.values().to_vector<float>();
  // Every embedding row NaN: every logit, hence the loss, is NaN.
  const auto embed = std::find_if(arena.entries().begin(), arena.entries().end(),
                                  [](const ArenaEntry& e) { return e.name == "model.embed_tokens.weight"; });
  ASSERT_NE(embed, arena.entries().end());
  float* values = arena.values().data<float>();
  for (int64_t i = embed->offset; i < embed->offset + embed->numel(); ++i)
    values[i] = std::numeric_limits<float>::quiet_NaN();
  StepSettings settings{.step = 7, .lr = 1e-3, .clip = 1.0, .objective = Objective::language_model(1e-4)};
  settings.failure_note = [] { return std::string("Last checkpoint: run/step_5."); };
  const TokenBatch batch = random_batch(9);
  expect_error(
      [&] {
        train_step(
            model, arena, optimizer, [&] { return batch; }, Device::cpu(), settings);
      },
      {"training loss is not finite at step 7", "Last checkpoint: run/step_5."});
  // The update did not run: every parameter outside the embedding is unchanged.
  const std::vector<float> after = arena.values().to_vector<float>();
  for (int64_t i = 0; i < int64_t(after.size()); ++i) {
    if (i < embed->offset || i >= embed->offset + embed->numel()) {
      ASSERT_EQ(after[size_t(i)], before[size_t(i)]) << i;
    }
  }
}

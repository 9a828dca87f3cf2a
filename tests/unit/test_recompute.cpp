// train.recompute: block. The checkpointed decoder keeps only each block's input through the forward
// and re-runs the block in backward; the gradients must be the ordinary ones, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/allocator.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/unit/op_test_util.h"
#include "tests/unit/test_support.h"

using namespace fathom;

namespace {

ModelConfig small_config(const std::string& norm, bool tied) {
  ModelConfig c;
  c.d_model = 32;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 48;
  c.vocab_size = 41;
  c.norm = norm;
  c.tie_embeddings = tied;
  return c;
}

// The gradient arena after two micro-batches of forward + backward (so accumulation is covered too).
std::vector<float> arena_gradients(const ModelConfig& c, bool recompute) {
  Decoder model(c);
  model.set_block_recompute(recompute);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(21);
  arena.zero_grad();
  const int64_t B = 2, T = 12;
  for (uint32_t micro = 0; micro < 2; ++micro) {
    const Tensor ids = test::lcg_token_ids({B * T}, c.vocab_size, 5 + micro).view({B, T});
    const Tensor targets = test::lcg_token_ids({B * T}, c.vocab_size, 50 + micro);
    LossParts loss = cross_entropy(reshape(model.forward(ids), {B * T, c.vocab_size}), targets, 1e-4);
    backward(scale(loss.loss, 0.5));
  }
  return arena.grads().to_vector<float>();
}

// The arena's gradients with and without recompute agree bit for bit, and are mostly non-zero.
void expect_recompute_bit_identical(const ModelConfig& c, const std::string& what) {
  const std::vector<float> plain = arena_gradients(c, false);
  const std::vector<float> recomputed = arena_gradients(c, true);
  ASSERT_EQ(plain.size(), recomputed.size()) << what;
  size_t nonzero = 0, differing = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    nonzero += plain[i] != 0.0f;
    differing += std::memcmp(&plain[i], &recomputed[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differing, 0u) << what << ": of " << plain.size() << " gradients";
  EXPECT_GT(nonzero, plain.size() / 2) << what << ": the gradients should be mostly non-zero";
}

struct Variant {
  std::string norm;
  bool tied;
};

}  // namespace

class BlockRecompute : public ::testing::TestWithParam<Variant> {};

TEST_P(BlockRecompute, GradientsAreBitIdenticalToTheOrdinaryBackward) {
  expect_recompute_bit_identical(small_config(GetParam().norm, GetParam().tied), GetParam().norm);
}

INSTANTIATE_TEST_SUITE_P(Norms, BlockRecompute,
                         ::testing::Values(Variant{"post", false}, Variant{"pre", true}),
                         [](const auto& info) { return info.param.norm + (info.param.tied ? "_tied" : "_untied"); });

TEST(BlockRecompute, KeepsOnlyTheBlockInputsThroughTheForward) {
  // What the forward leaves alive for backward: with recompute, one [B, T, d] tensor per block
  // instead of every block's saved activations.
  const ModelConfig c = small_config("post", false);
  auto live_after_forward = [&](bool recompute) {
    Decoder model(c);
    model.set_block_recompute(recompute);
    ParameterArena arena(model, Device::cpu());
    arena.initialise(3);
    Allocator& host = allocator_for(Device::cpu());
    const size_t before = host.stats(Device::cpu()).current;
    const Variable logits = model.forward(test::lcg_token_ids({4 * 64}, c.vocab_size, 9).view({4, 64}));
    return host.stats(Device::cpu()).current - before;
  };
  const size_t plain = live_after_forward(false), recomputed = live_after_forward(true);
  const size_t tokens = 4 * 64, logits = tokens * size_t(c.vocab_size) * 4;
  EXPECT_LT(recomputed, plain / 3) << "plain " << plain << " B, recompute " << recomputed << " B";
  EXPECT_GE(recomputed, logits + size_t(c.n_layers) * tokens * size_t(c.d_model) * 4);
}

TEST(BlockRecompute, SegmentRunsOnceForwardAndOnceInBackward) {
  Variable x(test::random_tensor({3, 5}, DType::f32, 1), true);
  Variable w(test::random_tensor({4, 5}, DType::f32, 2), true);
  int runs = 0;
  auto segment = [&](const Variable& in) {
    ++runs;
    return linear(in, w);
  };
  const Variable y = checkpoint(segment, x);
  EXPECT_EQ(runs, 1);
  backward(y, test::random_tensor({3, 4}, DType::f32, 3));
  EXPECT_EQ(runs, 2);
  Variable x2(x.value(), true), w2(w.value(), true);
  backward(linear(x2, w2), test::random_tensor({3, 4}, DType::f32, 3));
  EXPECT_EQ(x.grad().to_vector<float>(), x2.grad().to_vector<float>());
  EXPECT_EQ(w.grad().to_vector<float>(), w2.grad().to_vector<float>());
  {
    NoGrad no_grad;  // evaluation: an ordinary run, nothing recorded
    EXPECT_FALSE(checkpoint(segment, x).requires_grad());
  }
}

// MoDA: a re-run block reads the depth slots earlier blocks wrote and rewrites its own, whose
// gradients its readers (later blocks, re-run first) have filled in by then: every variant, with
// writer and reader keys, a slot window, pre and post norm, gives the ordinary gradients bit for bit.
TEST(BlockRecompute, MoDAGradientsAreBitIdenticalToTheOrdinaryBackward) {
  struct MoDACase {
    std::string variant, norm, depth_key;
    int64_t max_slots;
  };
  for (const MoDACase& m : {MoDACase{"attn_kv", "post", "writer", 0}, MoDACase{"attn_kv+ffn_kv", "pre", "writer", 0},
                            MoDACase{"extra_attn_kv+ffn_kv", "post", "reader", 0},
                            MoDACase{"attn_kv+ffn_kv", "post", "writer", 2}}) {
    ModelConfig c = small_config(m.norm, false);
    c.n_layers = 4;
    c.moda_variant = m.variant;
    c.moda_depth_key = m.depth_key;
    c.moda_max_slots = m.max_slots;
    expect_recompute_bit_identical(c, m.variant + " " + m.norm + " " + m.depth_key);
  }
}

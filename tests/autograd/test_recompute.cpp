// train.recompute. block: the checkpointed decoder keeps only each block's input through the forward
// and re-runs the block in backward. selective: projections and attention rebuild the outputs of
// RMSNorm, RoPE and SwiGLU instead of keeping them. The gradients must be the ordinary ones, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/saved_tensor.h"
#include "core/allocator.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"

using namespace fathom;

namespace {

ModelConfig small_config(const std::string& norm, bool tied) {
  return {.d_model = 32,
          .n_layers = 3,
          .n_heads = 4,
          .n_kv_heads = 2,
          .ffn_hidden = 48,
          .vocab_size = 41,
          .norm = norm,
          .tie_embeddings = tied};
}

// The gradient arena after two micro-batches of forward + backward (so accumulation is covered too).
std::vector<float> arena_gradients(const ModelConfig& c, Recompute recompute) {
  Decoder model(c);
  model.set_recompute(recompute);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(21);
  arena.zero_grad();
  const int64_t B = 2, T = 12;
  for (uint32_t micro = 0; micro < 2; ++micro) {
    const Tensor ids = test::lcg_token_ids({B * T}, c.vocab_size, 5 + micro).view({B, T});
    const Tensor targets = test::lcg_token_ids({B * T}, c.vocab_size, 50 + micro);
    LossParts loss = cross_entropy(reshape(model.logits(ids), {B * T, c.vocab_size}), targets, 1e-4);
    backward(scale(loss.loss, 0.5));
  }
  return arena.grads().to_vector<float>();
}

// The arena's gradients with and without recompute agree bit for bit, and are mostly non-zero.
void expect_recompute_bit_identical(const ModelConfig& c, Recompute recompute, const std::string& what) {
  const std::vector<float> plain = arena_gradients(c, Recompute::none);
  const std::vector<float> recomputed = arena_gradients(c, recompute);
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
  Recompute recompute;
  std::string norm;
  bool tied;
  bool qk_norm;
};

std::string variant_name(const Variant& v) {
  return std::string(recompute_name(v.recompute)) + "_" + v.norm + (v.tied ? "_tied" : "_untied") +
         (v.qk_norm ? "" : "_no_qk_norm");
}
// gtest prints a parameter with this, not as its raw bytes.
[[maybe_unused]] void PrintTo(const Variant& v, std::ostream* os) { *os << variant_name(v); }

// Bytes the forward leaves alive for backward (the logits included).
size_t live_after_forward(const ModelConfig& c, Recompute recompute, int64_t B, int64_t T) {
  Decoder model(c);
  model.set_recompute(recompute);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(3);
  Allocator& host = allocator_for(Device::cpu());
  const size_t before = host.stats(Device::cpu()).current;
  const Variable logits = model.logits(test::lcg_token_ids({B * T}, c.vocab_size, 9).view({B, T}));
  return host.stats(Device::cpu()).current - before;
}

}  // namespace

class RecomputeModes : public ::testing::TestWithParam<Variant> {};

TEST_P(RecomputeModes, GradientsAreBitIdenticalToTheOrdinaryBackward) {
  const Variant& v = GetParam();
  ModelConfig c = small_config(v.norm, v.tied);
  c.qk_norm = v.qk_norm;
  expect_recompute_bit_identical(c, v.recompute, v.norm);
}

INSTANTIATE_TEST_SUITE_P(Norms, RecomputeModes,
                         ::testing::Values(Variant{Recompute::block, "post", false, true},
                                           Variant{Recompute::block, "pre", true, true},
                                           Variant{Recompute::selective, "post", false, true},
                                           Variant{Recompute::selective, "pre", true, true},
                                           Variant{Recompute::selective, "pre", false, false}),
                         [](const auto& info) { return variant_name(info.param); });

TEST(BlockRecompute, KeepsOnlyTheBlockInputsThroughTheForward) {
  // What the forward leaves alive for backward: with recompute, one [B, T, d] tensor per block
  // instead of every block's saved activations.
  const ModelConfig c = small_config("post", false);
  const size_t plain = live_after_forward(c, Recompute::none, 4, 64);
  const size_t recomputed = live_after_forward(c, Recompute::block, 4, 64);
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
  for (const MoDACase& m :
       {MoDACase{"attn_kv", "post", "writer", 0}, MoDACase{"attn_kv+ffn_kv", "pre", "writer", 0},
        MoDACase{"extra_attn_kv+ffn_kv", "post", "reader", 0}, MoDACase{"attn_kv+ffn_kv", "post", "writer", 2}}) {
    ModelConfig c = small_config(m.norm, false);
    c.n_layers = 4;
    c.options.get<MoDAConfig>() = {
        .variant = parse_moda_variant(m.variant), .max_slots = m.max_slots, .depth_key = parse_depth_key(m.depth_key)};
    for (Recompute recompute : {Recompute::block, Recompute::selective})
      expect_recompute_bit_identical(
          c, recompute, std::string(recompute_name(recompute)) + " " + m.variant + " " + m.norm + " " + m.depth_key);
  }
}

// Selective: per block, the SwiGLU product, and RoPE's q and k (whose QK-norm keeps their input) are
// no longer kept; pre-norm also drops the two normalised inputs, post-norm the stream after attention
// (h, rebuilt from the block input and the attention's output); both drop the final norm's output.
TEST(SelectiveRecompute, DropsExactlyTheCheapOutputs) {
  const int64_t B = 4, T = 64;
  const size_t tokens = size_t(B * T);
  for (const std::string norm : {"post", "pre"}) {
    const ModelConfig c = small_config(norm, false);
    const size_t plain = live_after_forward(c, Recompute::none, B, T);
    const size_t selective = live_after_forward(c, Recompute::selective, B, T);
    const int64_t q = c.n_heads * c.head_dim(), kv = c.n_kv_heads * c.head_dim();
    const int64_t per_block = c.ffn_hidden + q + kv + (norm == "pre" ? 2 * c.d_model : c.d_model);
    const size_t dropped = tokens * size_t(c.n_layers * per_block + c.d_model) * sizeof(float);
    EXPECT_EQ(plain - selective, dropped) << norm << ": plain " << plain << " B, selective " << selective << " B";
  }
  // MoDA's depth attention rebuilds its q and k the same way; its slots hold copies of the keys.
  ModelConfig moda = small_config("post", false);
  moda.options.get<MoDAConfig>().variant = MoDAVariant::attn_kv_ffn_kv;
  const int64_t q = moda.n_heads * moda.head_dim(), kv = moda.n_kv_heads * moda.head_dim();
  EXPECT_EQ(live_after_forward(moda, Recompute::none, B, T) - live_after_forward(moda, Recompute::selective, B, T),
            tokens * size_t(moda.n_layers * (moda.ffn_hidden + q + kv + moda.d_model) + moda.d_model) * sizeof(float));
  // Without QK-norm RoPE reads the projection itself, which nothing else keeps: q and k stay.
  ModelConfig c = small_config("post", false);
  c.qk_norm = false;
  const size_t dropped =
      live_after_forward(c, Recompute::none, B, T) - live_after_forward(c, Recompute::selective, B, T);
  EXPECT_EQ(dropped, tokens * size_t(c.n_layers * (c.ffn_hidden + c.d_model) + c.d_model) * sizeof(float));
}

TEST(RecomputeNames, ParseAndNameRoundTripAndABadNameIsAnError) {
  for (const std::string& name : recompute_names()) EXPECT_EQ(recompute_name(parse_recompute(name)), name);
  EXPECT_EQ(parse_recompute("selective"), Recompute::selective);
  fathom::testing::expect_error([] { parse_recompute("all"); },
                                {"recompute must be one of none, selective, block, got 'all'"});
}

// Every node holding a rebuild shares it: built once, on first use, and only while a holder remains.
TEST(SelectiveRecompute, ARebuildIsSharedByItsHoldersAndBuiltOnce) {
  const Variable x(test::random_tensor({3, 5}, DType::f32, 1), true);
  const Variable w(test::random_tensor({5}, DType::f32, 2), true);
  Variable y, plain_y;
  {
    RecomputeCheapOps selective;
    y = rms_norm(x, w, 1e-6);
    plain_y = rms_norm(x.detach(), w.detach(), 1e-6);  // nothing recorded: no rebuild
  }
  ASSERT_NE(y.impl()->rebuild, nullptr);
  EXPECT_EQ(plain_y.impl()->rebuild, nullptr);
  EXPECT_EQ(rms_norm(x, w, 1e-6).impl()->rebuild, nullptr) << "outside the scope nothing is rebuildable";
  SavedTensor a = SavedTensor::of(y), b = SavedTensor::of(y);
  const Tensor first = a.get();
  EXPECT_EQ(first.to_vector<float>(), y.value().to_vector<float>());
  EXPECT_EQ(b.get().raw(), first.raw()) << "the second holder reuses the first build";
  EXPECT_EQ(SavedTensor(y.value()).get().raw(), y.value().raw()) << "a kept tensor is the value itself";
}

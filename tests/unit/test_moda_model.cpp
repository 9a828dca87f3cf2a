// MoDA in the decoder: variants, names, causality, equivalences, and that it trains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/unit/model_test_helpers.h"

using namespace fathom;

namespace {

ModelConfig moda_config(const std::string& variant, const std::string& norm = "post") {
  ModelConfig c;
  c.d_model = 24;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;  // G = 3, as in the paper's small models
  c.ffn_hidden = 40;
  c.vocab_size = 31;
  c.norm = norm;
  c.moda_variant = variant;
  return c;
}

Tensor ids_for(int64_t B, int64_t T, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> ids(size_t(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((seed * 2654435761u + i * 40503u) % uint32_t(vocab));
  return Tensor::from_vector(ids, {B, T});
}

std::vector<float> logits_of(const ModelConfig& c, const Tensor& ids, uint64_t seed) {
  return fathom::testing::SeededModel(c, seed).model.forward(ids).value().to_vector<float>();
}

}  // namespace

TEST(ModaModel, VariantNoneIsPlainOlmo2BitForBit) {
  ModelConfig plain = moda_config("none");
  const Tensor ids = ids_for(2, 9, plain.vocab_size, 3);
  ModelConfig none = plain;
  none.moda_max_slots = 4;  // irrelevant without depth
  EXPECT_EQ(logits_of(plain, ids, 5), logits_of(none, ids, 5));
}

TEST(ModaModel, VariantsAddTheirParametersAndCountThem) {
  for (const std::string& variant : moda_variants()) {
    for (const char* norm : {"post", "pre"}) {
      const ModelConfig c = moda_config(variant, norm);
      Decoder model(c);
      ParameterArena arena(model, Device::cpu());
      EXPECT_EQ(arena.numel(), parameter_count(c)) << variant << " " << norm;
      std::vector<std::string> names;
      for (const Parameter& p : model.parameters()) names.push_back(p.name);
      auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
      const bool ffn = variant == "attn_kv+ffn_kv" || variant == "extra_attn_kv+ffn_kv";
      EXPECT_EQ(has("model.layers.1.mlp.depth_kv.k_proj.weight"), ffn) << variant;
      EXPECT_EQ(has("model.layers.1.mlp.depth_kv.k_norm.weight"), ffn) << variant;
      EXPECT_EQ(has("model.layers.1.self_attn.depth_kv.v_proj.weight"), variant == "extra_attn_kv+ffn_kv") << variant;
    }
  }
}

TEST(ModaModel, DepthChangesTheOutputAndStaysCausal) {
  for (const std::string variant : {"attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"}) {
    const ModelConfig c = moda_config(variant);
    const Tensor ids = ids_for(1, 10, c.vocab_size, 7);
    const std::vector<float> with_depth = logits_of(c, ids, 9);
    ModelConfig without = c;
    without.moda_variant = "none";
    if (variant == "attn_kv") {
      EXPECT_NE(with_depth, logits_of(without, ids, 9));  // same weights
    }
    Tensor changed = ids.clone();
    changed.data<int32_t>()[9] = (changed.data<int32_t>()[9] + 1) % int32_t(c.vocab_size);
    const std::vector<float> after = logits_of(c, changed, 9);
    for (int64_t i = 0; i < 9 * c.vocab_size; ++i) ASSERT_EQ(with_depth[size_t(i)], after[size_t(i)]) << variant;
  }
}

TEST(ModaModel, MaxSlotsCoveringEverySlotEqualsUnbounded) {
  ModelConfig all = moda_config("attn_kv+ffn_kv");
  ModelConfig bounded = all;
  bounded.moda_max_slots = 4;  // 2 slots per block, 2 writing blocks
  ModelConfig narrow = all;
  narrow.moda_max_slots = 1;
  const Tensor ids = ids_for(2, 6, all.vocab_size, 2);
  EXPECT_EQ(logits_of(all, ids, 4), logits_of(bounded, ids, 4));
  EXPECT_NE(logits_of(all, ids, 4), logits_of(narrow, ids, 4));
}

TEST(ModaModel, DepthCacheBytes) {
  const ModelConfig c = moda_config("attn_kv+ffn_kv");
  Decoder model(c);
  // 2 writing blocks x 2 slots, K and V, [B=4, T=16, Hk=2, d=4] floats.
  EXPECT_EQ(model.depth_cache_bytes(4, 16), size_t(2 * 4 * 16 * 4 * 2 * 4 * 4));
  Decoder plain(moda_config("none"));
  EXPECT_EQ(plain.depth_cache_bytes(4, 16), 0u);
}

class ModaOverfit : public ::testing::TestWithParam<std::string> {};

TEST_P(ModaOverfit, MemorisesOneBatch) {
  const ModelConfig c = moda_config(GetParam());
  fathom::testing::SeededModel seeded(c, 5);
  const Tensor x = ids_for(2, 12, c.vocab_size, 11);
  const Tensor y = ids_for(2, 12, c.vocab_size, 12).view({24});
  const fathom::testing::OverfitLosses loss = fathom::testing::overfit_one_batch(seeded, x, y, 120);
  EXPECT_LT(loss.last, 0.1 * loss.first) << "first " << loss.first << " last " << loss.last;
  // Every depth projection received gradient (the depth stream routed it back to its writers).
  for (const ArenaEntry& e : seeded.arena.entries()) {
    if (e.name.find("depth_kv") != std::string::npos && e.name.find("layers.0.") != std::string::npos) {
      EXPECT_GT(std::abs(e.var.grad().to_vector<float>()[0]) + std::abs(e.var.grad().to_vector<float>()[1]), 0.0f)
          << e.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ModaOverfit,
                         ::testing::Values("attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

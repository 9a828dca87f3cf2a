#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "kernels/elementwise/elementwise.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/op_test_util.h"

using namespace fathom;

namespace {

ModelConfig tiny_config(const std::string& norm = "post") {
  // G = 3.
  return {
      .d_model = 24, .n_layers = 2, .n_heads = 6, .n_kv_heads = 2, .ffn_hidden = 40, .vocab_size = 37, .norm = norm};
}

Tensor random_ids(int64_t B, int64_t T, int64_t vocab, uint32_t seed) {
  return test::lcg_token_ids({B, T}, vocab, seed);
}

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> names;
  for (const Parameter& p : m.parameters()) names.push_back(p.name);
  return names;
}

}  // namespace

TEST(Decoder, ParameterNamesAreHuggingFaceOlmo2Names) {
  Decoder model(tiny_config());
  const std::vector<std::string> names = names_of(model);
  const std::set<std::string> got(names.begin(), names.end());
  std::set<std::string> expected{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                          "post_attention_layernorm", "post_feedforward_layernorm"})
      expected.insert(p + n + ".weight");
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(names.size(), got.size()) << "duplicate parameter names";
}

TEST(Decoder, PreNormUsesLlamaNamesAndNoQkNormWhenOff) {
  ModelConfig c = tiny_config("pre");
  c.qk_norm = false;
  Decoder model(c);
  const std::vector<std::string> names = names_of(model);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("model.layers.1.input_layernorm.weight"));
  EXPECT_TRUE(has("model.layers.1.post_attention_layernorm.weight"));
  EXPECT_FALSE(has("model.layers.1.post_feedforward_layernorm.weight"));
  EXPECT_FALSE(has("model.layers.0.self_attn.q_norm.weight"));
}

TEST(Decoder, ArenaMatchesParameterCountAndInitIsSeeded) {
  const ModelConfig c = tiny_config();
  Decoder model(c);
  ParameterArena arena(model, Device::cpu());
  EXPECT_EQ(arena.parameter_count(), parameter_count(c));
  // Every entry starts aligned, whatever the sizes before it (the norms' weights are d_model wide).
  for (const ArenaEntry& e : arena.entries()) EXPECT_EQ(e.offset % kArenaAlignment, 0) << e.name;
  arena.initialise(7);
  const std::vector<float> first = arena.values().to_vector<float>();
  arena.initialise(7);
  EXPECT_EQ(arena.values().to_vector<float>(), first);
  arena.initialise(8);
  EXPECT_NE(arena.values().to_vector<float>(), first);

  for (const ArenaEntry& e : arena.entries()) {
    const std::vector<float> v = e.var.value().to_vector<float>();
    if (e.name.find("norm") != std::string::npos) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 1.0f; })) << e.name;
    } else {
      const float max_abs =
          std::abs(*std::max_element(v.begin(), v.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }));
      EXPECT_LE(max_abs, 0.06f + 1e-6f) << e.name;  // truncated at 3 sigma of 0.02
      EXPECT_GT(max_abs, 0.01f) << e.name;
    }
  }
  // Embeddings form the only range without weight decay (with the alignment gap after them).
  for (const ParameterArena::Range& r : arena.decay_ranges()) {
    if (!r.weight_decay) {
      EXPECT_EQ(r.end - r.begin, (c.vocab_size * c.d_model + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment);
    }
  }
}

TEST(Decoder, ForwardShapeAndCausality) {
  const ModelConfig c = tiny_config();
  fathom::testing::SeededModel seeded(c, 3);
  const Decoder& model = seeded.model;
  Tensor ids = random_ids(2, 9, c.vocab_size, 11);
  const Tensor logits = model.logits(ids).value();
  EXPECT_EQ(logits.shape(), Shape({2, 9, c.vocab_size}));
  // Changing the last token must not change earlier positions' logits.
  Tensor changed = ids.clone();
  changed.data<int32_t>()[8] = (changed.data<int32_t>()[8] + 1) % int32_t(c.vocab_size);
  const Tensor logits2 = model.logits(changed).value();
  const float* a = logits.data<float>();
  const float* b = logits2.data<float>();
  for (int64_t t = 0; t < 8; ++t)
    for (int64_t v = 0; v < c.vocab_size; ++v) ASSERT_EQ(a[t * c.vocab_size + v], b[t * c.vocab_size + v]);
  bool last_differs = false;
  for (int64_t v = 0; v < c.vocab_size; ++v) last_differs |= a[8 * c.vocab_size + v] != b[8 * c.vocab_size + v];
  EXPECT_TRUE(last_differs);
}

TEST(Decoder, BadIdsAreClearErrors) {
  const ModelConfig c = tiny_config();
  fathom::testing::SeededModel seeded(c, 3);
  const Decoder& model = seeded.model;
  Tensor ids = random_ids(1, 4, c.vocab_size, 1);
  ids.data<int32_t>()[2] = int32_t(c.vocab_size);
  EXPECT_THROW(model.logits(ids), Error);
  EXPECT_THROW(model.logits(random_ids(1, 4, c.vocab_size, 1).view({4})), Error);
}

// The smallest end-to-end check that forward, backward and AdamW fit together.
class Overfit : public ::testing::TestWithParam<std::string> {};

TEST_P(Overfit, TinyModelMemorisesOneBatch) {
  const ModelConfig c = tiny_config(GetParam());
  fathom::testing::SeededModel seeded(c, 5);
  const Tensor batch = random_ids(2, 17, c.vocab_size, 99);
  const Tensor inputs = batch.view({34}).narrow(0, 33).clone();
  std::vector<int32_t> in(32), tgt(32);
  for (int i = 0; i < 32; ++i) {
    in[size_t(i)] = inputs.data<int32_t>()[i];
    tgt[size_t(i)] = inputs.data<int32_t>()[i + 1];
  }
  const Tensor x = Tensor::from_vector(in, {2, 16});
  const Tensor y = Tensor::from_vector(tgt, {32});
  const fathom::testing::OverfitLosses loss = fathom::testing::overfit_one_batch(seeded, x, y, 150);
  EXPECT_NEAR(loss.first, std::log(double(c.vocab_size)), 0.3);
  EXPECT_LT(loss.last, 0.1 * loss.first) << "first " << loss.first << " last " << loss.last;
}

INSTANTIATE_TEST_SUITE_P(Norms, Overfit, ::testing::Values("post", "pre"));

// ---- tied embeddings ----

TEST(Decoder, TiedEmbeddingsShareOneParameter) {
  ModelConfig c = tiny_config("pre");
  c.tie_embeddings = true;
  Decoder model(c);
  const std::vector<std::string> names = names_of(model);
  EXPECT_EQ(std::count(names.begin(), names.end(), "lm_head.weight"), 0);
  ParameterArena arena(model, Device::cpu());
  EXPECT_EQ(arena.parameter_count(), parameter_count(c));
  ModelConfig untied = c;
  untied.tie_embeddings = false;
  EXPECT_EQ(parameter_count(untied) - parameter_count(c), c.vocab_size * c.d_model);
}

TEST(Decoder, TiedEqualsUntiedWithACopiedHeadAndSumsBothGradients) {
  ModelConfig tied_config = tiny_config();
  tied_config.tie_embeddings = true;
  ModelConfig untied_config = tied_config;
  untied_config.tie_embeddings = false;
  Decoder tied(tied_config), untied(untied_config);
  ParameterArena tied_arena(tied, Device::cpu()), untied_arena(untied, Device::cpu());
  untied_arena.initialise(17);
  // The untied model's head is a copy of its embeddings; every other tensor is shared by name.
  TensorMap values = untied_arena.named_values();
  Tensor embed, head;
  for (auto& [name, t] : values) {
    if (name == "model.embed_tokens.weight") embed = t;
    if (name == "lm_head.weight") head = t;
  }
  head.copy_from(embed);
  TensorMap tied_values;
  for (const auto& [name, t] : values)
    if (name != "lm_head.weight") tied_values.emplace_back(name, t);
  tied_arena.load(tied_values, "test");

  const Tensor ids = random_ids(2, 7, tied_config.vocab_size, 5);
  const std::vector<int32_t> targets_v = random_ids(1, 14, tied_config.vocab_size, 6).to_vector<int32_t>();
  const Tensor targets = Tensor::from_vector(targets_v, {14});
  auto loss_of = [&](const Decoder& m) {
    return cross_entropy(reshape(m.logits(ids), {14, tied_config.vocab_size}), targets, 0.0).loss;
  };
  tied_arena.zero_grad();
  untied_arena.zero_grad();
  Variable tied_loss = loss_of(tied), untied_loss = loss_of(untied);
  EXPECT_EQ(tied_loss.value().item(), untied_loss.value().item());
  backward(tied_loss);
  backward(untied_loss);

  auto grad_of = [](const ParameterArena& arena, const std::string& name) {
    for (const ArenaEntry& e : arena.entries())
      if (e.name == name) return e.var.grad().to_vector<float>();
    throw std::runtime_error(name);
  };
  const std::vector<float> tied_grad = grad_of(tied_arena, "model.embed_tokens.weight");
  const std::vector<float> embed_grad = grad_of(untied_arena, "model.embed_tokens.weight");
  const std::vector<float> head_grad = grad_of(untied_arena, "lm_head.weight");
  for (size_t i = 0; i < tied_grad.size(); ++i)
    ASSERT_NEAR(tied_grad[i], embed_grad[i] + head_grad[i], 1e-6f * (1 + std::abs(tied_grad[i]))) << i;
}

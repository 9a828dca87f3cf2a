// The seams new model families plug into: per-layer kinds (layers/layer_kinds.h), the model output
// with its taps, the objective's terms (train/run/objective.h) and frozen parameters
// (train/run/parameter_selection.h, layers/parameter_arena.h).
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "kernels/attention/attention.h"
#include "layers/attention.h"
#include "layers/decoder.h"
#include "layers/layer_kinds.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"
#include "train/recipe/recipe.h"
#include "train/run/objective.h"
#include "train/run/parameter_selection.h"
#include "train/run/train_step.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

ModelConfig tiny(int64_t layers = 3) {
  return {.d_model = 16, .n_layers = layers, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 24, .vocab_size = 37};
}

Tensor ids_for(int64_t B, int64_t T, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> ids(size_t(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((seed * 2654435761u + i * 40503u) % uint32_t(vocab));
  return Tensor::from_vector(ids, {B, T});
}

TokenBatch batch_for(const ModelConfig& c, uint32_t seed) {
  return {ids_for(2, 7, c.vocab_size, seed), ids_for(2, 7, c.vocab_size, seed + 1)};
}

std::vector<float> grads_of(const ModelConfig& c, const Objective& objective) {
  fathom::testing::SeededModel m(c, 3);
  m.arena.zero_grad();
  accumulate_gradients(m.model, batch_for(c, 5), Device::cpu(), objective, 1.0);
  return m.arena.grads().to_vector<float>();
}

}  // namespace

TEST(LayerKinds, AttentionIsTheDefaultAndPatternsRepeat) {
  EXPECT_EQ(layer_kind_names().front(), "attention");
  ModelConfig c = tiny(4);
  EXPECT_EQ(c.layer_kind(3), "attention");
  c.layers = {"attention", "attention"};
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.layer_kind(3), "attention");
  c.layers = {"attention", "attention", "attention"};
  expect_error([&] { c.validate(); }, {"3 kinds", "n_layers (4)"});
  c.layers = {"attention", "atention"};
  expect_error([&] { Decoder model(c); }, {"layer 1", "'atention'", "did you mean 'attention'"});
}

TEST(LayerKinds, RecipeNamesKindsPerLayer) {
  const std::string base =
      "model: {d_model: 16, n_layers: 4, n_heads: 4, vocab_size: 37, ffn_hidden: 24, layers: LAYERS}\n"
      "data: {train: [x.txt]}\ntrain: {batch_size: 1, seq_len: 8, steps: 1, optimizer: {lr: 1.0e-3}}\n";
  auto with = [&](const std::string& layers) {
    std::string text = base;
    text.replace(text.find("LAYERS"), 6, layers);
    return text;
  };
  // All attention is the default, stored one way.
  EXPECT_TRUE(parse_recipe(with("[attention, attention]"), "r.yaml").model.layers.empty());
  expect_error([&] { parse_recipe(with("[attention, dsl]"), "r.yaml"); },
               {"model.layers[1] must be one of attention", "'dsl'"});
  expect_error([&] { parse_recipe(with("[attention, attention, attention]"), "r.yaml"); },
               {"inconsistent model", "does not divide n_layers (4)"});
}

TEST(LayerKinds, CostsAreTheLayersReports) {
  ModelConfig c = tiny();
  const Decoder model(c);
  const std::vector<LayerCost> costs = model.layer_costs(10);
  ASSERT_EQ(costs.size(), 3u);
  // Per token: attention keeps q and k before and after RoPE (QK-norm), v and o; the block its input,
  // the sublayer outputs and SwiGLU's gate, up and output.
  const int64_t q = 16, kv = 8, d = 16, f = 24;
  EXPECT_EQ(costs[0].saved_elements, 2 * q + q + 2 * kv + kv + 4 * d + 3 * f);
  EXPECT_EQ(costs[0].saved_stats, 2 + 4 + 2);  // q/k norm rstd, lse per head, the block norms' rstd
  EXPECT_EQ(costs[0].extra_flops, 6.0 * q * 10);
  int64_t listed = 0;
  for (const Parameter& p : model.parameters()) listed += p.var.shape().numel();
  EXPECT_EQ(parameter_count(c), listed);
}

TEST(ModelOutput, TapsGiveEachLayersOutputAndEntropy) {
  const ModelConfig c = tiny();
  fathom::testing::SeededModel m(c, 11);
  NoGrad no_grad;
  const Tensor ids = ids_for(2, 9, c.vocab_size, 1);
  const ModelOutput plain = m.model.forward(ids);
  EXPECT_TRUE(plain.layer_outputs.empty() && plain.measures.empty() && plain.aux_losses.empty());
  const ModelOutput tapped = m.model.forward(ids, {.layer_outputs = true, .taps = {kAttentionEntropyTap}});
  ASSERT_EQ(tapped.layer_outputs.size(), 3u);
  ASSERT_EQ(tapped.measures.size(), 3u);
  EXPECT_EQ(tapped.hidden.value().to_vector<float>(), plain.hidden.value().to_vector<float>());
  for (const LayerMeasures& measures : tapped.measures) {
    const auto h = measures.find(kAttentionEntropyTap);
    ASSERT_TRUE(h != measures.end());
    // Between a one-hot row (0) and uniform rows over 1..9 keys (at most log 9).
    EXPECT_GT(h->second, 0.0);
    EXPECT_LT(h->second, std::log(9.0));
  }
  EXPECT_EQ(tapped.layer_outputs[0].value().shape(), (Shape{2, 9, 16}));
}

TEST(ModelOutput, AttentionEntropyMatchesTheScoreMatrix) {
  const int64_t B = 2, T = 6, Hq = 4, Hk = 2, d = 8;
  const Tensor q = fathom::test::random_tensor({B, T, Hq, d}, DType::f32, 1, -2, 2);
  const Tensor k = fathom::test::random_tensor({B, T, Hk, d}, DType::f32, 2, -2, 2);
  const double scale = 0.4;
  const std::vector<float> qs = q.to_vector<float>(), ks = k.to_vector<float>();
  double total = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300, z = 0, entropy = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i)
            dot += double(qs[size_t(((b * T + t) * Hq + h) * d + i)]) *
                   double(ks[size_t(((b * T + j) * Hk + h / 2) * d + i)]);
          s[size_t(j)] = dot * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        for (double x : s) z += std::exp(x - mx);
        for (double x : s) {
          const double p = std::exp(x - mx) / z;
          entropy -= p * std::log(p);
        }
        total += entropy;
      }
  EXPECT_NEAR(attention_entropy(q, k, scale), total / double(B * T * Hq), 1e-5);
}

TEST(Objective, TermsAreNamedAndValidated) {
  expect_error([&] { Objective({{"ce", 1.0}, {"zloss", 1e-5}}); }, {"unknown term 'zloss'", "did you mean 'z_loss'"});
  expect_error([&] { Objective({{"ce", -1.0}}); }, {"train.loss.ce", ">= 0"});
  expect_error([&] { Objective({{"z_loss", 1e-4}}); }, {"z_loss needs ce"});
  const ModelConfig c = tiny();
  fathom::testing::SeededModel m(c, 3);
  expect_error(
      [&] {
        accumulate_gradients(m.model, batch_for(c, 5), Device::cpu(), Objective({{"ce", 0.0}}), 1.0);
      },
      {"every term has weight 0"});
}

TEST(Objective, WeightsScaleTheirTermsGradients) {
  const ModelConfig c = tiny();
  const std::vector<float> one = grads_of(c, Objective({{"ce", 1.0}, {"z_loss", 1e-3}}));
  const std::vector<float> two = grads_of(c, Objective({{"ce", 2.0}, {"z_loss", 2e-3}}));
  ASSERT_EQ(one.size(), two.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    diff += std::pow(double(two[i]) - 2.0 * double(one[i]), 2);
    norm += std::pow(2.0 * double(one[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
  // The default objective is the pretraining one, bit for bit.
  const Recipe defaults;  // named: GCC 12 warns (-Wmaybe-uninitialized, a false positive) on a temporary's member
  EXPECT_EQ(grads_of(c, Objective(defaults.train.loss)), grads_of(c, Objective::language_model(1e-5)));
}

TEST(FrozenParameters, GlobsSelectAndMustMatch) {
  const std::vector<std::string> names{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                       "model.layers.1.self_attn.q_proj.weight", "lm_head.weight"};
  EXPECT_EQ(frozen_parameters(names, {}, {}), std::set<std::string>{});
  EXPECT_EQ(frozen_parameters(names, {}, {"model.embed_tokens.*", "lm_head.*"}),
            (std::set<std::string>{"model.embed_tokens.weight", "lm_head.weight"}));
  EXPECT_EQ(
      frozen_parameters(names, {"model.layers.1.*"}, {}),
      (std::set<std::string>{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"}));
  EXPECT_EQ(
      frozen_parameters(names, {"model.layers.*"}, {"*.0.*"}),
      (std::set<std::string>{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"}));
  expect_error([&] { frozen_parameters(names, {}, {"model.layerz.*"}); }, {"train.frozen", "'model.layerz.*'"});
  expect_error([&] { frozen_parameters(names, {"nope"}, {}); }, {"train.trainable", "'nope'"});
  expect_error([&] { frozen_parameters(names, {}, {"*"}); }, {"no parameter to train"});
}

TEST(FrozenParameters, HoldNoGradientNorStateAndDoNotMove) {
  const ModelConfig c = tiny();
  std::vector<std::string> names;
  for (const auto& [name, shape] : decoder_parameter_shapes(c)) names.push_back(name);
  const std::set<std::string> frozen = frozen_parameters(names, {"model.layers.1.*"}, {});
  Decoder plain_model(c), frozen_model(c);
  ParameterArena plain(plain_model, Device::cpu()), arena(frozen_model, Device::cpu(), frozen);
  plain.initialise(7);
  arena.initialise(7);
  // The same initial values whatever is frozen.
  const TensorMap before = arena.named_values();
  std::map<std::string, std::vector<float>> initial;
  for (const auto& [name, t] : plain.named_values()) initial[name] = t.to_vector<float>();
  for (const auto& [name, t] : before) EXPECT_EQ(t.to_vector<float>(), initial[name]) << name;
  int64_t trainable = 0;
  for (const ArenaEntry& e : arena.entries()) trainable += e.trainable ? e.numel() : 0;
  EXPECT_EQ(arena.trainable_parameter_count(), trainable);
  EXPECT_LT(arena.trainable_parameter_count(), arena.parameter_count());
  AdamW optimizer(arena, AdamWConfig{});
  for (const auto& [name, t] : optimizer.state())
    EXPECT_TRUE(name == "step" || name.find("model.layers.1.") != std::string::npos) << name;
  const StepSettings settings{.step = 1, .lr = 1e-2, .clip = 1.0, .objective = Objective::language_model(1e-4)};
  train_step(
      frozen_model, arena, optimizer, [&] { return batch_for(c, 3); }, Device::cpu(), settings);
  for (const auto& [name, t] : arena.named_values()) {
    const bool moved = t.to_vector<float>() != initial[name];
    EXPECT_EQ(moved, name.starts_with("model.layers.1.")) << name;
  }
  // The optimizer state round-trips; a run that freezes otherwise refuses it.
  AdamW restored(arena, AdamWConfig{});
  EXPECT_NO_THROW(restored.load_state(optimizer.state(), "optimizer.safetensors"));
  AdamW unfrozen(plain, AdamWConfig{});
  expect_error([&] { unfrozen.load_state(optimizer.state(), "optimizer.safetensors"); }, {"missing optimizer tensor"});
  expect_error([&] { ParameterArena bad(frozen_model, Device::cpu(), {"model.nothing"}); }, {"'model.nothing'"});
}

TEST(FrozenParameters, RecipeKeysAndSavedZLoss) {
  const std::string recipe =
      "model: {d_model: 16, n_layers: 2, n_heads: 4, vocab_size: 37, ffn_hidden: 24}\n"
      "data: {train: [x.txt]}\n"
      "train: {batch_size: 1, seq_len: 8, steps: 1, optimizer: {lr: 1.0e-3}, frozen: ['model.embed_tokens.*'],"
      " loss: {ce: 1, z_loss: 0.001}}\n";
  const Recipe r = parse_recipe(recipe, "r.yaml");
  EXPECT_EQ(r.train.frozen, std::vector<std::string>{"model.embed_tokens.*"});
  EXPECT_EQ(r.train.loss.at("z_loss"), 0.001);
  const std::string text = recipe_to_yaml(r);
  EXPECT_NE(text.find("loss: {ce: 1, z_loss: 0.001}"), std::string::npos) << text;
  EXPECT_EQ(parse_saved_recipe(text, "recipe.yaml"), r);
  expect_error([&] { parse_recipe(recipe + "moda: {variant: attn}\n", "r.yaml"); },
               {"moda.variant must be one of none, attn_kv", "'attn'"});
  // A run saved before train.loss existed.
  std::string old = text;
  old.replace(old.find("loss: {ce: 1, z_loss: 0.001}"), 28, "z_loss: 0.001");
  EXPECT_EQ(parse_saved_recipe(old, "recipe.yaml").train.loss, r.train.loss);
  expect_error([&] { parse_recipe(old, "r.yaml"); }, {"unknown key 'train.z_loss'", "train.loss"});
}

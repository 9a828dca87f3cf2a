// MoDA in the decoder: variants, names, causality, equivalences, and that it trains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/depth_stream.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/rope/rope.h"
#include "layers/decoder.h"
#include "layers/depth_kv.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/op_test_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/recipe/recipe.h"

using namespace fathom;

namespace {

ModelConfig moda_config(const std::string& variant, const std::string& norm = "post",
                        const std::string& depth_key = "writer") {
  // G = 3, as in the paper's small models.
  ModelConfig c{
      .d_model = 24, .n_layers = 3, .n_heads = 6, .n_kv_heads = 2, .ffn_hidden = 40, .vocab_size = 31, .norm = norm};
  c.options.get<MoDAConfig>() = {.variant = parse_moda_variant(variant), .depth_key = parse_depth_key(depth_key)};
  return c;
}

Tensor ids_for(int64_t B, int64_t T, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> ids(size_t(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((seed * 2654435761u + i * 40503u) % uint32_t(vocab));
  return Tensor::from_vector(ids, {B, T});
}

std::vector<float> logits_of(const ModelConfig& c, const Tensor& ids, uint64_t seed) {
  return fathom::testing::SeededModel(c, seed).model.logits(ids).value().to_vector<float>();
}

}  // namespace

TEST(ModaModel, VariantNoneIsPlainOlmo2BitForBit) {
  ModelConfig plain = moda_config("none");
  const Tensor ids = ids_for(2, 9, plain.vocab_size, 3);
  ModelConfig none = plain;
  none.options.get<MoDAConfig>().max_slots = 4;  // irrelevant without depth
  EXPECT_EQ(logits_of(plain, ids, 5), logits_of(none, ids, 5));
}

TEST(ModaModel, VariantsAddTheirParametersAndCountThem) {
  for (const std::string& variant : moda_variant_names()) {
    for (const char* norm : {"post", "pre"}) {
      for (const std::string& key : depth_key_names()) {
        const ModelConfig c = moda_config(variant, norm, key);
        Decoder model(c);
        ParameterArena arena(model, Device::cpu());
        EXPECT_EQ(arena.parameter_count(), parameter_count(c)) << variant << " " << norm;
        std::vector<std::string> names;
        for (const Parameter& p : model.parameters()) names.push_back(p.name);
        auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
        const bool ffn = variant == "attn_kv+ffn_kv" || variant == "extra_attn_kv+ffn_kv";
        EXPECT_EQ(has("model.layers.1.mlp.depth_kv.k_proj.weight"), ffn) << variant;
        // Reader keys are normalised by each reader, so the writers have no k-norm of their own.
        EXPECT_EQ(has("model.layers.1.mlp.depth_kv.k_norm.weight"), ffn && key == "writer") << variant << " " << key;
        EXPECT_EQ(has("model.layers.1.self_attn.depth_kv.v_proj.weight"), variant == "extra_attn_kv+ffn_kv") << variant;
      }
    }
  }
}

TEST(ModaModel, DepthChangesTheOutputAndStaysCausal) {
  for (const std::string variant : {"attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"}) {
    for (const std::string& key : depth_key_names()) {
      const ModelConfig c = moda_config(variant, "post", key);
      const Tensor ids = ids_for(1, 10, c.vocab_size, 7);
      const std::vector<float> with_depth = logits_of(c, ids, 9);
      ModelConfig without = c;
      without.options.get<MoDAConfig>().variant = MoDAVariant::none;
      if (variant == "attn_kv") {
        EXPECT_NE(with_depth, logits_of(without, ids, 9));  // same weights
      }
      Tensor changed = ids.clone();
      changed.data<int32_t>()[9] = (changed.data<int32_t>()[9] + 1) % int32_t(c.vocab_size);
      const std::vector<float> after = logits_of(c, changed, 9);
      for (int64_t i = 0; i < 9 * c.vocab_size; ++i) ASSERT_EQ(with_depth[size_t(i)], after[size_t(i)]) << variant;
    }
  }
}

// attn_kv has the same parameters with either depth key: same weights, different operator.
TEST(ModaModel, ReaderKeysDifferFromWriterKeys) {
  for (const char* norm : {"post", "pre"}) {
    const ModelConfig writer = moda_config("attn_kv", norm, "writer");
    const ModelConfig reader = moda_config("attn_kv", norm, "reader");
    const Tensor ids = ids_for(2, 8, writer.vocab_size, 4);
    const std::vector<float> w = logits_of(writer, ids, 6), r = logits_of(reader, ids, 6);
    ASSERT_EQ(w.size(), r.size());
    double diff = 0, norm2 = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      diff += (double(w[i]) - r[i]) * (double(w[i]) - r[i]);
      norm2 += double(w[i]) * w[i];
    }
    EXPECT_GT(std::sqrt(diff / norm2), 1e-4) << norm;
  }
}

TEST(ModaModel, BadDepthKeyIsAClearError) {
  ModelConfig c = moda_config("attn_kv");
  fathom::testing::expect_error([&] { parse_depth_key("both"); }, {"moda.depth_key", "writer, reader", "'both'"});
  const std::string recipe =
      "model: {d_model: 24, n_layers: 3, n_heads: 6, vocab_size: 31, ffn_hidden: 40}\n"
      "moda: {variant: attn_kv, depth_key: readers}\n"
      "data: {train: [x.txt]}\ntrain: {batch_size: 1, seq_len: 8, steps: 1, optimizer: {lr: 1.0e-3}}\n";
  fathom::testing::expect_error([&] { parse_recipe(recipe, "r.yaml"); }, {"moda.depth_key", "readers", "reader"});
}

// Gradients through a stack of MoDA blocks in f64: d/dx by gradcheck; a reader's k-norm weight and an
// FFN writer's k projection by central differences against backward(). With reader keys the k-norm
// also normalises the reader's depth keys and the writer's raw K is what the readers normalise (vector
// gradients); with writer keys the readers (G = 3) leave weights and each layer's two slots are formed
// together.
TEST(ModaModel, GradcheckThroughTheBlocks) {
  using fathom::test::random_tensor;
  for (const std::string& key : depth_key_names()) {
    for (const char* norm : {"post", "pre"}) {
      ModelConfig c = moda_config("attn_kv+ffn_kv", norm, key);
      c.d_model = 12;  // 6 query heads, 2 KV heads (G = 3) of dim 2
      c.ffn_hidden = 16;
      const int64_t B = 2, T = 5, L = 3;
      std::vector<std::unique_ptr<Block>> blocks;
      uint64_t seed = 100;
      std::vector<Parameter> params;
      for (int64_t i = 0; i < L; ++i) {
        blocks.push_back(std::make_unique<Block>(c, i));
        for (Parameter& p : blocks.back()->parameters()) {
          const bool gain = p.init.kind == ParameterInit::Kind::constant;
          p.var.value() = random_tensor(p.var.shape(), DType::f64, seed++, gain ? 0.5 : -0.6, gain ? 1.5 : 0.6);
          p.name = "layers." + std::to_string(i) + "." + p.name;
          params.push_back(p);
        }
      }
      const Tensor positions = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4}, {T});
      auto run = [&](const Variable& x) {
        DepthStream stream(B, T, (L - 1) * c.options.get<MoDAConfig>().slots_per_block(), c.n_kv_heads, c.head_dim(),
                           DType::f64, Device::cpu());
        Variable h = x;
        for (int64_t i = 0; i < L; ++i)
          h = blocks[size_t(i)]->forward(h, MixerInputs{positions, &stream, i + 1 < L}, LayerReport());
        return h;
      };
      const Tensor x = random_tensor({B, T, c.d_model}, DType::f64, 7);
      const GradcheckResult r = gradcheck([&](const std::vector<Variable>& in) { return run(in[0]); }, {x});
      EXPECT_TRUE(r.ok) << key << "/" << norm << ": " << r.message;

      const Tensor w = random_tensor({B, T, c.d_model}, DType::f64, 8);
      auto loss = [&]() {
        NoGrad no_grad;
        const std::vector<double> y = fathom::test::values(run(Variable(x)).value()), wv = fathom::test::values(w);
        double l = 0;
        for (size_t i = 0; i < y.size(); ++i) l += y[i] * wv[i];
        return l;
      };
      for (Parameter& p : params) p.var.set_grad(Tensor());
      backward(run(Variable(x)), w);
      for (const char* name : {"layers.2.self_attn.k_norm.weight", "layers.0.mlp.depth_kv.k_proj.weight"}) {
        const auto it = std::find_if(params.begin(), params.end(), [&](const Parameter& p) { return p.name == name; });
        ASSERT_NE(it, params.end()) << name;
        const int64_t n = it->var.shape().numel();
        fathom::testing::expect_gradient_matches_differences(*it, loss, {0, n / 2, n - 1}, 1e-4, key + "/" + norm);
      }
    }
  }
}

// A reader-key model through a checkpoint: the recipe keeps moda.depth_key, the weights load into a
// model built from the saved recipe, and its logits are the original's bit for bit.
TEST(ModaModel, ReaderKeysCheckpointRoundTrip) {
  fathom::testing::ScratchFolder dir;
  const Recipe recipe = parse_recipe(
      "model: {d_model: 24, n_layers: 3, n_heads: 6, n_kv_heads: 2, vocab_size: 31, ffn_hidden: 40}\n"
      "moda: {variant: attn_kv+ffn_kv, depth_key: reader}\n"
      "data: {train: [x.txt]}\ntrain: {batch_size: 1, seq_len: 8, steps: 1, optimizer: {lr: 1.0e-3}}\n",
      "reader.yaml");
  ASSERT_EQ(name_of(recipe.model.options.get<MoDAConfig>().depth_key), "reader");
  Decoder model(recipe.model);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(21);
  const Tensor ids = ids_for(2, 7, recipe.model.vocab_size, 5);
  const std::vector<float> before = model.logits(ids).value().to_vector<float>();
  save_checkpoint(dir.path(), 1, CheckpointData{arena.named_values(), {}, "{}", recipe_to_yaml(recipe)}, 1);

  const CheckpointData loaded = load_checkpoint(dir.path());
  const Recipe again = parse_recipe(loaded.recipe_yaml, "checkpoint recipe.yaml");
  EXPECT_EQ(again.model, recipe.model);
  Decoder restored(again.model);
  ParameterArena restored_arena(restored, Device::cpu());
  restored_arena.load(loaded.model, "checkpoint");
  EXPECT_EQ(restored.logits(ids).value().to_vector<float>(), before);
  // A writer-key model has the FFN writers' k-norms: the reader checkpoint does not fit it.
  ModelConfig writer = again.model;
  writer.options.get<MoDAConfig>().depth_key = DepthKey::writer;
  Decoder other(writer);
  ParameterArena other_arena(other, Device::cpu());
  fathom::testing::expect_error([&] { other_arena.load(loaded.model, "checkpoint"); }, {"missing tensor", "k_norm"});
}

TEST(ModaModel, MaxSlotsCoveringEverySlotEqualsUnbounded) {
  ModelConfig all = moda_config("attn_kv+ffn_kv");
  ModelConfig bounded = all;
  bounded.options.get<MoDAConfig>().max_slots = 4;  // 2 slots per block, 2 writing blocks
  ModelConfig narrow = all;
  narrow.options.get<MoDAConfig>().max_slots = 1;
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

INSTANTIATE_TEST_SUITE_P(Variants, ModaOverfit, ::testing::Values("attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

// A depth K/V writer's keys are rotated as attention's are, with the model's RoPE scaling: rotated back
// by their own model's angles, writers of a llama3-scaled and of an unscaled model (same weights) hold
// the same keys, and at positions past the scaling's original context the rotations differ.
TEST(ModaModel, DepthKvWritersRotateKeysWithTheModelsRopeScaling) {
  ModelConfig plain = moda_config("attn_kv+ffn_kv");
  plain.rope_theta = 10000.0;
  ModelConfig scaled = plain;
  scaled.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 16};
  const int64_t B = 2, T = 5, d = plain.head_dim();
  const Tensor positions = Tensor::from_vector<int32_t>({3, 40, 77, 150, 301}, {T});
  const Tensor x = fathom::test::random_tensor({B, T, plain.d_model}, DType::f32, 31);
  const auto unrotated_keys = [&](const ModelConfig& c) {
    DepthKVProjection writer(c);
    ParameterArena arena(writer, Device::cpu());
    arena.initialise(7);
    DepthStream stream(B, T, 1, c.n_kv_heads, d, DType::f32, Device::cpu());
    NoGrad no_grad;
    writer.write(stream, Variable(x), MixerInputs{positions});
    const Tensor k = stream.read(0, 1).k.view({B, T, c.n_kv_heads, d});
    return std::pair{k, rope_backward(k, positions, c.rope_theta, c.rope_scaling)};
  };
  const auto [plain_k, plain_back] = unrotated_keys(plain);
  const auto [scaled_k, scaled_back] = unrotated_keys(scaled);
  fathom::test::expect_close(scaled_back, plain_back, 1e-5, 1e-5);
  double largest = 0;
  const std::vector<double> a = fathom::test::values(scaled_k), b = fathom::test::values(plain_k);
  for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(a[i] - b[i]));
  EXPECT_GT(largest, 1e-2);
}

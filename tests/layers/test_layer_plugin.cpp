// A layer kind defined in the test's own files (mean_mixer_kind.h) plugs in through its registration
// alone: a recipe names it and sets its option, the objective weighs its loss term, evaluation logs its
// metric, and the model trains and decodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "tests/layers/mean_mixer_kind.h"
#include "tests/support/test_support.h"
#include "train/recipe/recipe.h"
#include "train/recipe/resume_check.h"
#include "train/run/objective.h"
#include "train/run/trainer.h"

using namespace fathom;
using fathom::testing::expect_error;
namespace fs = std::filesystem;

namespace {

const std::string kCorpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";

std::string plugin_recipe(const fs::path& run_dir, const std::string& extra = "") {
  return "name: plugin\n"
         "model: {d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64, vocab_size: 264,\n"
         "        layers: [attention, mean]}\n"
         "mean: {scale: 0.5}\n"
         "data:\n"
         "  tokenizer: bytes\n"
         "  train: [" +
         kCorpus +
         "/train/sotu_2009-2019.txt]\n"
         "  validation: {moby_dick: [" +
         kCorpus +
         "/validation/moby_dick.txt]}\n"
         "train: {device: cpu, threads: 2, batch_size: 4, seq_len: 32, steps: 6, loss: {ce: 1, mean_gate: 0.5},\n"
         "        optimizer: {lr: 3.0e-3}, schedule: {warmup_steps: 2}}\n"
         "eval: {every: 3, batches: 2}\n"
         "checkpoint: {every: 3, keep_last: 2}\n"
         "log: {every: 1, dir: " +
         run_dir.string() + "}\n" + extra;
}

class LayerPlugin : public ::testing::Test {
 protected:
  // Registered for each test and removed after it, so no other test sees the kind.
  void SetUp() override { register_layer_kind(test::mean_layer_kind()); }
  void TearDown() override { unregister_layer_kind(test::kMeanKind); }
};

TEST_F(LayerPlugin, ItsOptionIsARecipeKeyWithTheUsualChecks) {
  const Recipe recipe = parse_recipe(plugin_recipe("/tmp/unused"), "plugin.yaml");
  EXPECT_EQ(recipe.model.options.get<test::MeanOptions>().scale, 0.5);
  EXPECT_EQ(recipe.model.layer_kind(1), test::kMeanKind);
  // Written back with the other keys, and read back the same.
  const std::string yaml = recipe_to_yaml(recipe);
  EXPECT_NE(yaml.find("scale: 0.5"), std::string::npos) << yaml;
  EXPECT_EQ(parse_saved_recipe(yaml, "saved.yaml").model, recipe.model);
  expect_error([] { parse_recipe(plugin_recipe("/tmp/unused"), "p.yaml", {"mean.scale=-1"}); },
               {"mean.scale must be >= 0, got -1"});
  expect_error([] { parse_recipe(plugin_recipe("/tmp/unused"), "p.yaml", {"mean.sacle=2"}); },
               {"did you mean 'mean.scale'"});
  // Its loss term is one the objective knows; a kind cannot claim a name twice.
  const std::vector<std::string> terms = objective_term_names();
  EXPECT_NE(std::find(terms.begin(), terms.end(), test::kMeanGateLoss), terms.end());
  expect_error([] { register_layer_kind(test::mean_layer_kind()); },
               {"the name 'mean' is already the layer kind 'mean''s"});
  expect_error([] { unregister_layer_kind("dsla"); }, {"the layer kind 'dsla' is built in"});
}

TEST_F(LayerPlugin, ItsOptionMustMatchOnResumeUnlessTheKindSaysItMayChange) {
  const Recipe saved = parse_recipe(plugin_recipe("/tmp/unused"), "plugin.yaml");
  const Recipe changed = parse_recipe(plugin_recipe("/tmp/unused"), "plugin.yaml", {"mean.scale=2"});
  expect_error([&] { check_resume_compatible(saved, changed, "run/recipe.yaml"); },
               {"mean.scale: 0.5 in the run, 2 in the recipe"});
  // The same kind, its option declared resumable: the resume check lets it change and lists it.
  unregister_layer_kind(test::kMeanKind);
  LayerKind kind = test::mean_layer_kind();
  kind.options[0].resumable = true;
  register_layer_kind(kind);
  EXPECT_NO_THROW(check_resume_compatible(saved, changed, "run/recipe.yaml"));
  const std::vector<std::string> keys = keys_changeable_on_resume();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "mean.scale"), keys.end());
}

TEST_F(LayerPlugin, TheOptionReachesTheLayer) {
  ModelConfig half = parse_recipe(plugin_recipe("/tmp/unused"), "plugin.yaml").model;
  ModelConfig whole = half;
  whole.options.get<test::MeanOptions>().scale = 1.0;
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{5, 70, 3, 9, 44, 1}, {1, 6});
  NoGrad no_grad;
  Decoder a(half), b(whole);
  ParameterArena arena_a(a, Device::cpu()), arena_b(b, Device::cpu());
  arena_a.initialise(3);
  arena_b.initialise(3);
  // Layer 1's output is h + norm(mixer(h)) in post-norm, where a scale cancels: compare the mixers'
  // outputs through the kind's tap instead.
  const ModelOutput measured_a = a.forward(ids, {.taps = {test::kMeanOutputTap}});
  const ModelOutput measured_b = b.forward(ids, {.taps = {test::kMeanOutputTap}});
  ASSERT_EQ(measured_a.measures.size(), 2u);
  EXPECT_TRUE(measured_a.measures[0].empty());  // the attention layer has no such tap
  EXPECT_NEAR(measured_a.measures[1].at("mean.abs_sum") * 2, measured_b.measures[1].at("mean.abs_sum"), 1e-4);
  EXPECT_EQ(measured_a.measures[1].at("mean.values"), 6.0 * 32);
}

TEST_F(LayerPlugin, ItDecodesAsItsForwardComputes) {
  const ModelConfig config = parse_recipe(plugin_recipe("/tmp/unused"), "plugin.yaml").model;
  Decoder model(config);
  ParameterArena arena(model, Device::cpu());
  arena.initialise(5);
  NoGrad no_grad;
  const std::vector<int32_t> ids{7, 100, 32, 32, 250, 13, 61, 2, 9, 77};
  const Tensor all = Tensor::from_vector(ids, {2, 5});
  const std::vector<float> whole = model.forward(all).hidden.value().to_vector<float>();
  DecodeState prefill = model.start_decoding(2, 5, DType::f32, Device::cpu());
  const std::vector<float> prefilled = model.decode(all, prefill).value().to_vector<float>();
  DecodeState steps = model.start_decoding(2, 5, DType::f32, Device::cpu());
  std::vector<float> stepped(whole.size());
  const int64_t d = config.d_model;
  for (int64_t t = 0; t < 5; ++t) {
    const Tensor column = Tensor::from_vector(std::vector<int32_t>{ids[size_t(t)], ids[size_t(5 + t)]}, {2, 1});
    const std::vector<float> h = model.decode(column, steps).value().to_vector<float>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < d; ++i) stepped[size_t((b * 5 + t) * d + i)] = h[size_t(b * d + i)];
  }
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_NEAR(prefilled[i], whole[i], 1e-5) << i;
    EXPECT_NEAR(stepped[i], whole[i], 1e-5) << i;
  }
}

TEST_F(LayerPlugin, ItTrainsWithItsLossTermAndReportsItsMetric) {
  const fs::path dir = fs::temp_directory_path() / "fathom_layer_plugin";
  fs::remove_all(dir);
  RunOptions quiet;
  quiet.quiet = true;
  const TrainResult result = run_training(parse_recipe(plugin_recipe(dir), "plugin.yaml"), quiet);
  EXPECT_EQ(result.steps_done, 6);
  EXPECT_TRUE(std::isfinite(result.last_loss));
  std::ifstream in(dir / "metrics.jsonl");
  std::stringstream metrics;
  metrics << in.rdbuf();
  EXPECT_NE(metrics.str().find("\"loss/mean_gate\""), std::string::npos) << metrics.str();
  EXPECT_NE(metrics.str().find("\"mean.L1.mean_abs/moby_dick\""), std::string::npos) << metrics.str();
  fs::remove_all(dir);
}

}  // namespace

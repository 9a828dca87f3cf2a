// The recipe's distill section: every key read, defaults, and a clear error for each bad value.
#include <gtest/gtest.h>

#include "distill_test_helpers.h"
#include "train/distill/distill_config.h"

using namespace fathom;
using fathom::testing::distill_yaml;
using fathom::testing::expect_error;

namespace {

Recipe distill_recipe(const std::string& section, int steps = 5, const std::vector<std::string>& overrides = {}) {
  return parse_recipe(distill_yaml("/tmp/unused-distill-run", section, steps), "distill.yaml", overrides);
}

}  // namespace

TEST(DistillRecipe, ReadsEveryKeyAndTakesTheTeachersModel) {
  const Recipe r = distill_recipe(
      "order: [1, 0], layers: 2, loss: {ce: 0.5, logit_kl: 1, layer_align: 2, gate_cos: 0.1}, temperature: 2, "
      "align: kl, calibration_batches: 3");
  EXPECT_EQ(r.model.n_layers, 2);
  EXPECT_EQ(r.model.d_model, 32);
  EXPECT_EQ(r.distill.order, (std::vector<std::string>{"1", "0"}));
  EXPECT_EQ(r.distill.steps_per_layer, 5);
  EXPECT_EQ(r.train.steps, 5);
  EXPECT_EQ(r.distill.loss.at("gate_cos"), 0.1);
  EXPECT_EQ(r.distill.temperature, 2.0);
  EXPECT_EQ(r.distill.align, "kl");
  EXPECT_EQ(r.distill.calibration_batches, 3);
  const DistillPlan plan = distill_plan(r);
  EXPECT_EQ(plan.order, DistillOrder::list);
  EXPECT_EQ(plan.listed, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(plan.count, 2);
  // The resolved recipe writes its distill section and reads back equal.
  EXPECT_EQ(parse_recipe(recipe_to_yaml(r), "saved.yaml"), r);
}

TEST(DistillRecipe, DefaultsAndFractions) {
  const Recipe r = distill_recipe("layers: [0.5, 1.0]");
  EXPECT_EQ(r.distill.order, std::vector<std::string>{"entropy"});
  EXPECT_EQ(r.distill.align, "mse");
  const DistillPlan plan = distill_plan(r);
  EXPECT_EQ(plan.order, DistillOrder::entropy);
  EXPECT_EQ(plan.count, 2);
  EXPECT_EQ(plan.named_models, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(distill_plan(distill_recipe("order: sensitivity, layers: 1")).order, DistillOrder::sensitivity);
  // A list without layers converts every layer it lists.
  EXPECT_EQ(distill_plan(distill_recipe("order: [1]")).count, 1);
}

TEST(DistillRecipe, EveryBadValueIsAnErrorNamingItsKey) {
  expect_error([] { distill_recipe("order: [0, 2], layers: 1"); },
               {"distill.yaml:", "distill.order", "layer 2 is out of range", "2 layers"});
  expect_error([] { distill_recipe("order: [1, 1]"); }, {"distill.order", "listed twice"});
  expect_error([] { distill_recipe("order: entrpy, layers: 1"); }, {"distill.order", "'entrpy' is no layer index"});
  expect_error([] { distill_recipe("layers: [0.5, 1.5]"); }, {"distill.layers", "'1.5' must be a fraction in (0, 1]"});
  expect_error([] { distill_recipe("layers: [0]"); }, {"distill.layers", "converts 0 layers; give 1..2"});
  expect_error([] { distill_recipe("layers: [-0.25]"); }, {"distill.layers", "fraction in (0, 1]"});
  expect_error([] { distill_recipe("layers: [0.1]"); }, {"distill.layers", "converts no layer"});
  expect_error([] { distill_recipe("layers: [0.5, 0.6]"); }, {"distill.layers", "as an earlier fraction does"});
  expect_error([] { distill_recipe("layers: 3"); }, {"distill.layers", "converts 3 layers; give 1..2"});
  expect_error([] { distill_recipe(""); }, {"distill.layers", "missing"});
  expect_error([] { distill_recipe("layers: 1, loss: {layer_align: 0}"); },
               {"distill.loss", "every term has weight 0"});
  expect_error([] { distill_recipe("layers: 1, loss: {kd: 1}"); }, {"distill.loss", "must be one of"});
  expect_error([] { distill_recipe("layers: 1, loss: {layer_align: -1}"); }, {"distill.loss.layer_align", ">= 0"});
  expect_error([] { distill_recipe("layers: 1, temperature: 0"); }, {"distill.temperature", "> 0"});
  expect_error([] { distill_recipe("layers: 1, align: cosine"); }, {"distill.align", "mse, kl"});
  expect_error([] { distill_recipe("layers: 1, calibration_batches: 0"); }, {"distill.calibration_batches", ">= 1"});
  expect_error([] { distill_recipe("layers: 1, techer: x"); }, {"distill.techer", "did you mean"});
  expect_error([] { distill_recipe("layers: 1, loss: {gate_cos: 1}", 5, {"dsla.states=1"}); },
               {"distill.loss", "gate_cos", "dsla.states is 1"});
  expect_error([] { distill_recipe("layers: 1", 5, {"train.steps=3"}); },
               {"distill.steps_per_layer and train.steps", "give only one"});
  // The teacher: missing, not a source, not there, not a decoder fathom can load.
  expect_error([] { parse_recipe("distill: {layers: 1}\n" + fathom::testing::tiny_data_and_train(3), "d.yaml"); },
               {"distill.teacher", "missing"});
  expect_error([] { distill_recipe("layers: 1", 5, {"distill.teacher=somewhere"}); }, {"distill.teacher", "somewhere"});
  expect_error([] { distill_recipe("layers: 1", 5, {"distill.teacher=checkpoint:/nonexistent/teacher"}); },
               {"distill.teacher", "/nonexistent/teacher"});
  expect_error([] { distill_recipe("layers: 1", 5, {"distill.teacher=hf:" + std::string(FATHOM_SOURCE_DIR)}); },
               {"distill.teacher", "fathom can load"});
}

TEST(DistillRecipe, OrdinaryRecipesHaveNoDistillSection) {
  const Recipe r = parse_recipe(
      "name: plain\nmodel: {d_model: 32, n_layers: 2, n_heads: 4, ffn_hidden: 64, "
      "vocab_size: 264}\n" +
          fathom::testing::tiny_data_and_train(3),
      "plain.yaml");
  EXPECT_TRUE(r.distill.teacher.empty());
  EXPECT_EQ(recipe_to_yaml(r).find("\ndistill:"), std::string::npos) << recipe_to_yaml(r);
}

TEST(DistillRecipe, TheExampleRecipeParses) {
  const std::string file = std::string(FATHOM_SOURCE_DIR) + "/recipes/dsla/distill_quickstart.yaml";
  const std::string teacher = "distill.teacher=checkpoint:" + fathom::testing::tiny_teacher().string();
  // The tiny teacher has 2 layers: 0.25 and 0.5 of them both round to one layer.
  expect_error([&] { load_recipe(file, {teacher}); }, {"distill.layers", "as an earlier fraction does"});
  const Recipe r = load_recipe(file, {teacher, "distill.layers=[0.5, 1.0]"});
  EXPECT_EQ(r.distill.steps_per_layer, 200);
  EXPECT_EQ(r.distill.loss.at("gate_cos"), 0.1);
  EXPECT_EQ(distill_plan(r).count, 2);
}

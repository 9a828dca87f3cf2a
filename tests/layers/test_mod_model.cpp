// MoD in the model (layers/routed_block.h): the recipe keys, the routed block against the dense one,
// per-sequence routing in batches, the predictor's separation from the LM gradients, costs that fall
// with capacity, and causal routing for evaluation and decoding.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "layers/decoder.h"
#include "layers/hf_export.h"
#include "layers/parameter_arena.h"
#include "layers/routed_block.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"
#include "train/measure/memory_plan.h"
#include "train/measure/throughput.h"
#include "train/recipe/recipe.h"
#include "train/run/objective.h"
#include "train/run/train_step.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

ModelConfig mod_config(double capacity, int64_t every = 2, int64_t layers = 4) {
  ModelConfig c{.d_model = 16, .n_layers = layers, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 24, .vocab_size = 37};
  c.options.get<ModConfig>().capacity = capacity;
  c.options.get<ModConfig>().every = every;
  return c;
}

const char* kRecipe = R"(name: tiny
model:
  size: olmo2_14M
mod:
  capacity: 0.125
data:
  train: [data/a.txt]
train:
  batch_size: 4
  seq_len: 64
  steps: 100
  optimizer:
    lr: 3.0e-4
)";

std::string recipe_error(const std::vector<std::string>& overrides, const std::string& text = kRecipe) {
  try {
    parse_recipe(text, "recipe.yaml", overrides);
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TokenBatch batch_for(int64_t B, int64_t T, int64_t vocab, uint32_t seed) {
  return {test::lcg_token_ids({B, T}, vocab, seed), test::lcg_token_ids({B, T}, vocab, seed + 7)};
}

std::vector<float> grads_of(const ModelConfig& c, const Objective& objective, const TokenBatch& batch) {
  fathom::testing::SeededModel m(c, 3);
  m.arena.zero_grad();
  accumulate_gradients(m.model, batch, Device::cpu(), objective, 1.0);
  return m.arena.grads().to_vector<float>();
}

}  // namespace

TEST(ModRecipe, KeysParseAndRoundTrip) {
  const Recipe r = parse_recipe(kRecipe, "r.yaml",
                                {"mod.every=3", "mod.router_weight=sigmoid", "mod.causal=aux_loss",
                                 "mod.aux_loss_weight=0.05", "mod.router=learned", "model.n_layers=6"});
  EXPECT_EQ(r.model.options.get<ModConfig>().capacity, 0.125);
  EXPECT_EQ(r.model.options.get<ModConfig>().every, 3);
  EXPECT_EQ(r.model.options.get<ModConfig>().router_weight, ModRouterWeight::sigmoid);
  EXPECT_EQ(r.model.options.get<ModConfig>().causal, ModCausal::aux_loss);
  EXPECT_EQ(r.model.options.get<ModConfig>().aux_loss_weight, 0.05);
  EXPECT_TRUE(parse_recipe(recipe_to_yaml(r), "saved.yaml") == r);
  // Routed: blocks 2 and 5 of 6 (block 0 stays dense).
  for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(r.model.options.get<ModConfig>().routes(l), l == 2 || l == 5) << l;
  EXPECT_EQ(r.model.options.get<ModConfig>().tokens_routed(64), 8);
  EXPECT_EQ(r.model.options.get<ModConfig>().tokens_routed(13), 2);  // ceil(13 / 8)
  EXPECT_FALSE(parse_recipe(kRecipe, "r.yaml", {"mod.capacity=0"}).model.options.get<ModConfig>().enabled());
}

TEST(ModRecipe, BadValuesNameTheKey) {
  EXPECT_CONTAINS(recipe_error({"mod.capacity=1.5"}), "mod.capacity");
  EXPECT_CONTAINS(recipe_error({"mod.capacity=-0.1"}), "mod.capacity");
  EXPECT_CONTAINS(recipe_error({"mod.every=0"}), "mod.every");
  const std::string weight = recipe_error({"mod.router_weight=sigmod"});
  EXPECT_CONTAINS(weight, "mod.router_weight must be one of identity, sigmoid");
  EXPECT_CONTAINS(weight, "did you mean 'sigmoid'");
  EXPECT_CONTAINS(recipe_error({"mod.causal=topk"}), "mod.causal must be one of predictor, aux_loss");
  EXPECT_CONTAINS(recipe_error({"mod.router=uniform"}), "mod.router must be one of learned, random");
  EXPECT_CONTAINS(recipe_error({"mod.aux_loss_weight=-1"}), "mod.aux_loss_weight");
  EXPECT_CONTAINS(recipe_error({"mod.predictor_loss_weight=-1"}), "mod.predictor_loss_weight");
  EXPECT_CONTAINS(recipe_error({"mod.every=9"}), "routes none of the 4 blocks");
  EXPECT_CONTAINS(recipe_error({"mod.capcity=0.5"}), "did you mean 'mod.capacity'");
  EXPECT_CONTAINS(recipe_error({"train.loss={ce: 1, mod_router: 0.1}"}), "mod.aux_loss_weight; set it there");
}

TEST(ModRecipe, MoDWithMoDAIsRejectedWithTheReason) {
  const std::string e = recipe_error({"moda.variant=attn_kv"});
  EXPECT_CONTAINS(e, "MoD and MoDA cannot be combined");
  EXPECT_CONTAINS(e, "writes no depth slot");
}

TEST(ModBlock, FullCapacityWithUnitWeightIsTheDenseBlock) {
  // c = 1 and g(r) = 1 (router weight e_0, inputs whose feature 0 is 1): out = block(x) exactly.
  ModelConfig c = mod_config(1.0, 1, 2);
  const RoutedBlock routed(c, 1);
  const Block dense(c, 1);
  ParameterArena dense_arena(dense, Device::cpu()), routed_arena(routed, Device::cpu());
  dense_arena.initialise(5);
  routed_arena.initialise(6);
  for (const Parameter& p : routed.parameters()) {
    if (p.name == "mod.router.weight") {
      Tensor w = Tensor::zeros(p.var.shape(), DType::f32);
      w.data<float>()[0] = 1;
      p.var.impl()->value.copy_from(w);
      continue;
    }
    bool found = false;
    for (const Parameter& q : dense.parameters())
      if (q.name == p.name) p.var.impl()->value.copy_from(q.var.value()), found = true;
    EXPECT_TRUE(found || p.name.starts_with("mod.")) << p.name;
  }
  Tensor x = test::random_tensor({3, 11, 16}, DType::f32, 7);
  for (int64_t i = 0; i < 33; ++i) x.data<float>()[i * 16] = 1.0f;
  std::vector<int32_t> pos(11);
  for (int32_t i = 0; i < 11; ++i) pos[size_t(i)] = i;
  const Tensor positions = Tensor::from_vector(pos, {11});
  NoGrad no_grad;
  EXPECT_EQ(routed.forward(Variable(x), MixerInputs{positions}, LayerReport()).value().to_vector<float>(),
            dense.forward(Variable(x), MixerInputs{positions}, LayerReport()).value().to_vector<float>());
}

TEST(ModBlock, ChosenTokensKeepTheirOriginalPositions) {
  ModelConfig c = mod_config(0.5, 1, 2);
  c.options.get<ModConfig>().router_weight = ModRouterWeight::sigmoid;
  fathom::testing::SeededModel m(c, 8);
  const auto& routed = dynamic_cast<const RoutedBlock&>(*m.model.blocks()[1]);
  const Tensor x = test::random_tensor({2, 9, 16}, DType::f32, 9);
  std::vector<int32_t> pos(9);
  for (int32_t i = 0; i < 9; ++i) pos[size_t(i)] = i;
  NoGrad no_grad;
  const Tensor out = routed.forward(Variable(x), MixerInputs{Tensor::from_vector(pos, {9})}, LayerReport()).value();
  // By hand: top-5 of the router per sequence, the block on those rows at positions idx, the mix.
  const Parameter router = [&] {
    for (const Parameter& p : routed.parameters())
      if (p.name == "mod.router.weight") return p;
    return Parameter{};
  }();
  const Tensor r = linear_wide(Variable(x), router.var).value().view({2, 9});
  const Tensor idx = topk_per_sequence(r, 5);
  const Tensor y = routed.block().forward(Variable(gather_rows(x, idx)), MixerInputs{idx}, LayerReport()).value();
  EXPECT_EQ(out.to_vector<float>(), routed_mix_forward(x, y, r, idx, RouteWeight::sigmoid).to_vector<float>());
  // Positions 0..k-1 instead would be another block output.
  std::vector<int32_t> first(10);
  for (int32_t i = 0; i < 10; ++i) first[size_t(i)] = i % 5;
  const Tensor y_wrong =
      routed.block()
          .forward(Variable(gather_rows(x, idx)), MixerInputs{Tensor::from_vector(first, {2, 5})}, LayerReport())
          .value();
  EXPECT_NE(y.to_vector<float>(), y_wrong.to_vector<float>());
}

TEST(ModModel, RoutesExactlyKPerSequenceInABatch) {
  ModelConfig c = mod_config(0.25);
  fathom::testing::SeededModel m(c, 10);
  NoGrad no_grad;
  const ModelOutput out = m.model.forward(test::lcg_token_ids({3, 13}, 37, 11), {.taps = {kRoutingTap}});
  ASSERT_EQ(out.measures.size(), 4u);
  EXPECT_FALSE(!out.measures[0].empty() || !out.measures[2].empty());
  for (int l : {1, 3}) {
    ASSERT_TRUE(!out.measures[size_t(l)].empty());
    const RoutingCounts counts = RoutingCounts::from(out.measures[size_t(l)]);
    EXPECT_EQ(counts.tokens, 39);
    EXPECT_EQ(counts.topk, 3 * 4);  // ceil(0.25 * 13) = 4 in each of the 3 sequences
    EXPECT_GE(counts.accuracy(), 0.0);
    EXPECT_LE(counts.accuracy(), 1.0);
  }
  // The predictor's loss is a named term of the output, one per routed block.
  const ModelOutput trained = [&] {
    GradMode::set_enabled(true);
    ModelOutput o = m.model.forward(test::lcg_token_ids({3, 13}, 37, 11));
    GradMode::set_enabled(false);
    return o;
  }();
  ASSERT_EQ(trained.aux_losses.size(), 2u);
  EXPECT_EQ(trained.aux_losses[0].name, "mod_predictor");
}

TEST(ModModel, AuxTargetsAreTopKMembershipPerSequence) {
  // The router's BCE against each sequence's own top-k: with B = 2 it equals the mean of the
  // per-sequence losses, which a batch-wide top-k would not give.
  ModelConfig c = mod_config(0.25);
  c.options.get<ModConfig>().causal = ModCausal::aux_loss;
  fathom::testing::SeededModel m(c, 12);
  const Tensor ids = test::lcg_token_ids({2, 12}, 37, 13);
  NoGrad no_grad;
  GradMode::set_enabled(true);
  const double both = m.model.forward(ids).aux_losses[0].value.value().item();
  const double first = m.model.forward(ids.narrow(0, 1)).aux_losses[0].value.value().item();
  const double second = m.model.forward(ids.narrow(1, 1)).aux_losses[0].value.value().item();
  GradMode::set_enabled(false);
  EXPECT_NEAR(both, 0.5 * (first + second), 1e-6);
}

TEST(ModModel, PredictorLeavesTheLanguageModelGradientsAlone) {
  const ModelConfig c = mod_config(0.25);
  const TokenBatch batch = batch_for(2, 12, 37, 14);
  const Objective lm_only({{"ce", 1.0}});
  const Objective with_predictor = Objective::for_model({{"ce", 1.0}}, c);
  EXPECT_EQ(with_predictor.weight("mod_predictor"), 1.0);
  const std::vector<float> a = grads_of(c, lm_only, batch), b = grads_of(c, with_predictor, batch);
  fathom::testing::SeededModel m(c, 3);
  int64_t predictor_nonzero = 0;
  for (const ArenaEntry& p : m.arena.entries()) {
    const int64_t n = p.numel(), offset = p.offset;
    const bool predictor = p.name.find("mod.predictor") != std::string::npos;
    for (int64_t i = offset; i < offset + n; ++i) {
      if (predictor)
        predictor_nonzero += b[size_t(i)] != 0;
      else
        ASSERT_EQ(a[size_t(i)], b[size_t(i)]) << p.name;
    }
  }
  EXPECT_GT(predictor_nonzero, 0);
}

TEST(ModModel, DeterministicAndRecomputeGivesTheSameGradients) {
  for (const ModRouter router : {ModRouter::learned, ModRouter::random}) {
    ModelConfig c = mod_config(0.5);
    c.options.get<ModConfig>().router = router;
    const TokenBatch batch = batch_for(3, 10, 37, 15);
    const Objective objective = Objective::for_model({{"ce", 1.0}}, c);
    const std::vector<float> once = grads_of(c, objective, batch);
    EXPECT_EQ(once, grads_of(c, objective, batch));
    fathom::testing::SeededModel m(c, 3);
    m.model.set_recompute(Recompute::block);
    m.arena.zero_grad();
    accumulate_gradients(m.model, batch, Device::cpu(), objective, 1.0);
    EXPECT_EQ(m.arena.grads().to_vector<float>(), once);
  }
}

TEST(ModModel, CostsFallWithCapacity) {
  const double dense = training_flops_per_token(mod_config(0), 64);
  const double half = training_flops_per_token(mod_config(0.5), 64);
  const double eighth = training_flops_per_token(mod_config(0.125), 64);
  EXPECT_LT(eighth, half);
  EXPECT_LT(half, dense);
  const MemoryPlan plan_dense = plan_training_memory({mod_config(0), 4, 64, false, Recompute::none, 0});
  const MemoryPlan plan_mod = plan_training_memory({mod_config(0.125), 4, 64, false, Recompute::none, 0});
  EXPECT_LT(plan_mod.activations, plan_dense.activations);
  // A routed block's weights see k of S tokens: its weight FLOPs are the dense block's times k / S
  // plus the router's and the predictor's.
  const Decoder model(mod_config(0.125));
  const std::vector<LayerCost> costs = model.layer_costs(64);
  EXPECT_NEAR(costs[1].weight_flops, costs[0].weight_flops * 8 / 64 + 6.0 * (16 + 16 * 2 + 2), 1e-6);
}

TEST(ModModel, CausalPrefillEqualsStepByStepDecode) {
  for (const ModCausal causal : {ModCausal::predictor, ModCausal::aux_loss}) {
    ModelConfig c = mod_config(0.5, 2, 4);
    c.options.get<ModConfig>().causal = causal;
    fathom::testing::SeededModel m(c, 16);
    const Tensor ids = test::lcg_token_ids({2, 9}, 37, 17);
    NoGrad no_grad;
    const ModelOutput whole = m.model.forward(ids, {.taps = {kRoutingTap}, .as_decoded = true});
    DecodeState prefill = m.model.start_decoding(2, 9, DType::f32, Device::cpu());
    const Tensor prefilled = m.model.decode(ids, prefill).value();
    DecodeState steps = m.model.start_decoding(2, 9, DType::f32, Device::cpu());
    std::vector<float> stepped;
    for (int64_t t = 0; t < 9; ++t) {
      std::vector<int32_t> column;
      for (int64_t b = 0; b < 2; ++b) column.push_back(ids.to_vector<int32_t>()[size_t(b * 9 + t)]);
      const std::vector<float> h =
          m.model.decode(Tensor::from_vector(column, {2, 1}), steps).value().to_vector<float>();
      stepped.insert(stepped.end(), h.begin(), h.end());
    }
    // stepped is [t][b][d]; the others [b][t][d].
    const std::vector<float> p = prefilled.to_vector<float>(), w = whole.hidden.value().to_vector<float>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 9; ++t)
        for (int64_t i = 0; i < 16; ++i) {
          const size_t bt = size_t((b * 9 + t) * 16 + i), tb = size_t((t * 2 + b) * 16 + i);
          EXPECT_NEAR(stepped[tb], p[bt], 1e-5);
          EXPECT_NEAR(w[bt], p[bt], 1e-5);
        }
    // A token that skips a routed block adds nothing to its cache.
    for (int l : {1, 3}) {
      EXPECT_EQ(prefill.layers[size_t(l)]->length(), RoutingCounts::from(whole.measures[size_t(l)]).causal);
      EXPECT_EQ(steps.layers[size_t(l)]->length(), RoutingCounts::from(whole.measures[size_t(l)]).causal);
    }
    EXPECT_EQ(prefill.layers[0]->length(), 9);  // a dense block holds every position of the batch
  }
}

TEST(ModModel, CausalRoutingNeedsNoGrad) {
  fathom::testing::SeededModel m(mod_config(0.5), 18);
  expect_error(
      [&] {
        m.model.forward(test::lcg_token_ids({1, 5}, 37, 19), {.as_decoded = true});
      },
      {"causal routing is for evaluation and generation"});
}

TEST(ModModel, HfExportRefusesARoutedModel) {
  expect_error([] { hf_architecture_for(mod_config(0.125)); }, {"routes blocks with MoD", "mod.capacity 0.125"});
  EXPECT_EQ(hf_architecture_for(mod_config(0)), "Olmo2ForCausalLM");
}

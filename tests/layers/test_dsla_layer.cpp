// The dsla layer kind (layers/dsla.h): its recipe keys and their errors, parameter names and shapes
// (the attention layer's for q/k/v/o, so a teacher's weights load), its init, the wiring of its gates,
// gamma and GQA heads, gradients through the layer, its cost report, and its constant decoding state.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "layers/decoder.h"
#include "layers/dsla.h"
#include "layers/hf_export.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"
#include "train/generate/generator.h"
#include "train/measure/memory_plan.h"
#include "train/measure/throughput.h"
#include "train/recipe/recipe.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

// d 16, 4 query heads of dim 4 over 2 KV heads (G = 2); layer 1 is dsla.
ModelConfig hybrid(int64_t states = 2, DslaGamma gamma = DslaGamma::layer, bool qk_norm = true) {
  ModelConfig c{.d_model = 16,
                .n_layers = 2,
                .n_heads = 4,
                .n_kv_heads = 2,
                .ffn_hidden = 24,
                .vocab_size = 37,
                .qk_norm = qk_norm,
                .layers = {"attention", "dsla"}};
  c.options.get<DslaConfig>() = {.states = states, .gamma = gamma};
  return c;
}

std::map<std::string, Shape> shapes_of(const ModelConfig& c) {
  std::map<std::string, Shape> out;
  for (const auto& [name, shape] : decoder_parameter_shapes(c)) out.emplace(name, shape);
  return out;
}

const std::string kRecipe =
    "model: {d_model: 16, n_layers: 2, n_heads: 4, n_kv_heads: 2, vocab_size: 37, ffn_hidden: 24, "
    "layers: [attention, dsla]}\n"
    "data: {train: [x.txt]}\ntrain: {batch_size: 1, seq_len: 8, steps: 1, optimizer: {lr: 1.0e-3}}\n";

// Sets every parameter named `name` of m to `values` (one per element).
void set_parameter(fathom::testing::SeededModel& m, const std::string& name, const Tensor& values) {
  for (const Parameter& p : m.model.parameters())
    if (p.name == name) {
      Tensor dst = p.var.value();
      dst.copy_from(values);
      return;
    }
  FAIL() << "no parameter " << name;
}

Tensor parameter(const fathom::testing::SeededModel& m, const std::string& name) {
  for (const Parameter& p : m.model.parameters())
    if (p.name == name) return p.var.value();
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

}  // namespace

TEST(DslaRecipe, KeysParseAndBadValuesNameTheKey) {
  Recipe r = parse_recipe(kRecipe + "dsla: {states: 1, gamma: head}\n", "r.yaml");
  EXPECT_EQ(r.model.layers, (std::vector<std::string>{"attention", "dsla"}));
  EXPECT_EQ(r.model.options.get<DslaConfig>().states, 1);
  EXPECT_EQ(r.model.options.get<DslaConfig>().gamma, DslaGamma::head);
  // Defaults: two states, one gamma per layer; and the keys round-trip through the saved recipe.
  r = parse_recipe(kRecipe, "r.yaml");
  EXPECT_EQ(r.model.options.get<DslaConfig>(), DslaConfig{});
  EXPECT_EQ(r.model.options.get<DslaConfig>().states, 2);
  Recipe head = parse_recipe(kRecipe, "r.yaml", {"dsla.gamma=head"});
  EXPECT_EQ(parse_saved_recipe(recipe_to_yaml(head), "saved.yaml").model, head.model);
  expect_error([&] { parse_recipe(kRecipe + "dsla: {states: 3}\n", "r.yaml"); }, {"dsla.states", "[1, 2]"});
  expect_error([&] { parse_recipe(kRecipe + "dsla: {gamma: heads}\n", "r.yaml"); },
               {"dsla.gamma must be one of layer, head", "did you mean 'head'"});
  expect_error([&] { parse_recipe(kRecipe + "dsla: {state: 2}\n", "r.yaml"); }, {"dsla.states"});
  expect_error([&] { parse_recipe(kRecipe + "moda: {variant: attn_kv}\n", "r.yaml"); },
               {"moda.variant 'attn_kv' cannot be combined with dsla layers", "moda.variant: none"});
  ModelConfig c = hybrid();
  c.options.get<DslaConfig>().states = 0;
  expect_error([&] { c.validate(); }, {"dsla.states must be 1", "got 0"});
}

TEST(DslaLayer, KeepsTheAttentionNamesAndAddsItsGates) {
  const std::map<std::string, Shape> two = shapes_of(hybrid());
  ModelConfig dense = hybrid();
  dense.layers.clear();
  const std::map<std::string, Shape> teacher = shapes_of(dense);
  // Every tensor of the all-attention model exists in the hybrid with its shape: a teacher loads by name.
  for (const auto& [name, shape] : teacher) {
    ASSERT_TRUE(two.count(name)) << name;
    EXPECT_EQ(two.at(name), shape) << name;
  }
  const std::string l = "model.layers.1.self_attn.";
  EXPECT_EQ(two.at(l + "q_norm.weight"), Shape({16}));
  EXPECT_EQ(two.at(l + "k_norm.weight"), Shape({8}));
  EXPECT_EQ(two.at(l + "gate1_proj.weight"), Shape({16, 16}));
  EXPECT_EQ(two.at(l + "gate1_proj.bias"), Shape({16}));
  EXPECT_EQ(two.at(l + "gate2_proj.weight"), Shape({16, 16}));
  EXPECT_EQ(two.at(l + "gamma_logit"), Shape({1}));
  EXPECT_EQ(shapes_of(hybrid(2, DslaGamma::head)).at(l + "gamma_logit"), Shape({4}));
  EXPECT_EQ(two.size(), teacher.size() + 5);
  const std::map<std::string, Shape> one = shapes_of(hybrid(1));
  EXPECT_EQ(one.size(), teacher.size() + 2);  // gate 1 only, no gamma
  EXPECT_FALSE(one.count(l + "gamma_logit"));
  EXPECT_FALSE(shapes_of(hybrid(2, DslaGamma::layer, false)).count(l + "q_norm.weight"));
  EXPECT_EQ(parameter_count(hybrid()), parameter_count(dense) + 2 * (16 * 16 + 16) + 1);
  // HF has no class with such layers.
  expect_error([&] { hf_architecture_for(hybrid()); }, {"layer 1 is a 'dsla' layer"});
}

TEST(DslaLayer, InitialisesItsGatesAsSpecified) {
  fathom::testing::SeededModel m(hybrid(), 3);
  const std::string l = "model.layers.1.self_attn.";
  const std::vector<float> w1 = parameter(m, l + "gate1_proj.weight").to_vector<float>();
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 16; ++j) ASSERT_EQ(w1[size_t(i * 16 + j)], i == j ? 1.0f : 0.0f) << i << "," << j;
  for (const char* zero : {"gate1_proj.bias", "gate2_proj.bias", "gamma_logit"})
    for (float v : parameter(m, l + zero).to_vector<float>()) EXPECT_EQ(v, 0.0f) << zero;
  // Gate 2: the model's truncated normal (std 0.02, cut at 3 sigma).
  double sum_squares = 0;
  const std::vector<float> w2 = parameter(m, l + "gate2_proj.weight").to_vector<float>();
  for (float v : w2) {
    EXPECT_LE(std::abs(v), 0.06f + 1e-6f);
    sum_squares += double(v) * v;
  }
  EXPECT_NEAR(std::sqrt(sum_squares / double(w2.size())), 0.02, 0.006);
}

TEST(DslaLayer, EqualGatesMakeTwoStatesOneWhateverGamma) {
  // With gate 2 a copy of gate 1 the states are equal, so gamma S1 + (1 - gamma) S2 = S1: the
  // two-state layer must equal the one-state layer of the same weights, for any gamma per head.
  fathom::testing::SeededModel one(hybrid(1), 7), two(hybrid(2, DslaGamma::head), 7);
  const std::string l = "model.layers.1.self_attn.";
  set_parameter(one, l + "gate1_proj.bias", fathom::test::random_tensor({16}, DType::f32, 1, -2, 2));
  set_parameter(one, l + "gate1_proj.weight", fathom::test::random_tensor({16, 16}, DType::f32, 2, -1, 1));
  for (const Parameter& p : one.model.parameters()) set_parameter(two, p.name, p.var.value());
  set_parameter(two, l + "gate2_proj.weight", parameter(one, l + "gate1_proj.weight"));
  set_parameter(two, l + "gate2_proj.bias", parameter(one, l + "gate1_proj.bias"));
  set_parameter(two, l + "gamma_logit", Tensor::from_vector(std::vector<float>{-3, 0.5, 2, 7}, {4}));
  NoGrad no_grad;
  const Tensor ids = fathom::test::lcg_token_ids({2, 9}, 37, 4);
  fathom::test::expect_close(two.model.forward(ids).hidden.value(), one.model.forward(ids).hidden.value(), 1e-5, 1e-5,
                             "hidden");
  // And different gates do change it.
  set_parameter(two, l + "gate2_proj.bias", Tensor::full({16}, -4.0, DType::f32));
  const std::vector<float> a = two.model.forward(ids).hidden.value().to_vector<float>();
  const std::vector<float> b = one.model.forward(ids).hidden.value().to_vector<float>();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::abs(a[i] - b[i])));
  EXPECT_GT(diff, 1e-3);
}

TEST(DslaLayer, IsCausal) {
  fathom::testing::SeededModel m(hybrid(), 9);
  NoGrad no_grad;
  std::vector<int32_t> ids{5, 9, 1, 30, 2, 17, 8};
  const std::vector<float> before = m.model.forward(Tensor::from_vector(ids, {1, 7})).hidden.value().to_vector<float>();
  ids[5] = 33;  // changes positions 5 and 6 only
  const std::vector<float> after = m.model.forward(Tensor::from_vector(ids, {1, 7})).hidden.value().to_vector<float>();
  for (size_t i = 0; i < 5 * 16; ++i) ASSERT_EQ(before[i], after[i]) << i;
  EXPECT_NE(before[5 * 16], after[5 * 16]);
}

TEST(DslaLayer, GradientsThroughTheMixerMatchFiniteDifferences) {
  // f64 through the whole layer: projections, QK-norm, both gates (weights and biases), gamma, GQA.
  for (const ModelConfig& c : {hybrid(2, DslaGamma::head), hybrid(2), hybrid(1, DslaGamma::layer, false)}) {
    const Dsla mixer(c);
    std::vector<Parameter> params = mixer.parameters();
    for (size_t i = 0; i < params.size(); ++i)
      params[i].var.value() = fathom::test::random_tensor(params[i].var.shape(), DType::f64, 12 + i, -0.7, 0.7);
    const Tensor positions = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4}, {5});
    const auto mix = [&](const Variable& x) { return mixer.forward(x, MixerInputs{positions}, LayerReport()); };
    // With respect to the input (every path into the states).
    const GradcheckResult r = gradcheck([&](const std::vector<Variable>& in) { return mix(in[0]); },
                                        {fathom::test::random_tensor({2, 5, 16}, DType::f64, 11)});
    EXPECT_TRUE(r.ok) << c.options.get<DslaConfig>().states << " states: " << r.message;
    // With respect to the parameters: d/dtheta sum(w * mix(x)) by backward and by central differences.
    const Variable x(fathom::test::random_tensor({2, 5, 16}, DType::f64, 40));
    const Tensor w = fathom::test::random_tensor({2, 5, 16}, DType::f64, 41);
    const std::vector<double> wv = fathom::test::values(w);
    const auto objective = [&] {
      const std::vector<double> out = fathom::test::values(mix(x).value());
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += wv[i] * out[i];
      return sum;
    };
    for (Parameter& p : params) p.var.set_grad(Tensor());  // the gradcheck above accumulated into them
    backward(mix(x), w);
    for (Parameter& p : params) {
      const bool gate_or_gamma = p.name.find("gate") != std::string::npos || p.name == "gamma_logit";
      if (!gate_or_gamma && p.name != "q_norm.weight" && p.name != "v_proj.weight") continue;
      std::vector<int64_t> elements;
      for (int64_t e = 0; e < p.var.shape().numel(); e += (p.var.shape().numel() > 20 ? 7 : 1)) elements.push_back(e);
      fathom::testing::expect_gradient_matches_differences(
          p, objective, elements, 1e-5, std::to_string(c.options.get<DslaConfig>().states) + " states");
    }
  }
}

TEST(DslaLayer, ReportsItsCost) {
  const ModelConfig c = hybrid();
  const Decoder model(c);
  const std::vector<LayerCost> costs = model.layer_costs(100);
  const int64_t q = 16, kv = 8, d = 16, f = 24, head_dim = 4;
  // q and k before and after QK-norm, v, o, the kept scores (64 per token, head and state); the block's
  // residual-width tensors and SwiGLU's.
  EXPECT_EQ(costs[1].saved_elements, 2 * q + 2 * kv + kv + q + 2 * 4 * 64 + 4 * d + 3 * f);
  EXPECT_EQ(costs[1].saved_stats, 2 + 2 * q + 2);  // QK-norm rstd, the two fp32 gates, the block norms' rstd
  EXPECT_EQ(costs[1].rebuilt_elements, f + d);     // the block's own: nothing of the mixer's is rebuilt
  // 2 states x 4 heads x 3 x (2 C d + 4 d^2), C = 64 (the chunk) at seq 100 and the sequence at 10.
  EXPECT_DOUBLE_EQ(costs[1].extra_flops, 2 * 4 * 3.0 * (2 * 64 * head_dim + 4 * head_dim * head_dim));
  EXPECT_DOUBLE_EQ(model.layer_costs(10)[1].extra_flops, 2 * 4 * 3.0 * (2 * 10 * head_dim + 4 * head_dim * head_dim));
  EXPECT_DOUBLE_EQ(Decoder(hybrid(1)).layer_costs(100)[1].extra_flops, costs[1].extra_flops / 2);
  // The memory plan and MFU are sums of the reports.
  ModelConfig dense = c;
  dense.layers.clear();
  const MemoryPlanInput with{c, 2, 100, true}, without{dense, 2, 100, true};
  const LayerCost attention = Decoder(dense).layer_costs(100)[1];
  // The dsla block keeps more than the attention block it replaces, and is now the largest one, whose
  // gradients in flight the plan adds once more: twice the difference, over 2 x 100 tokens.
  EXPECT_EQ(int64_t(plan_training_memory(with).activations) - int64_t(plan_training_memory(without).activations),
            2 * 200 *
                (2 * (costs[1].saved_elements - attention.saved_elements) +
                 4 * (costs[1].saved_stats - attention.saved_stats)));
  EXPECT_DOUBLE_EQ(
      training_flops_per_token(c, 100) - training_flops_per_token(dense, 100),
      6.0 * double(parameter_count(c) - parameter_count(dense)) + costs[1].extra_flops - attention.extra_flops);
}

TEST(DslaLayer, DecodesWithAConstantState) {
  for (int64_t states : {1, 2}) {
    const Decoder model(hybrid(states));
    const DecodeState state = model.start_decoding(3, 50, DType::f32, Device::cpu());
    // Layer 0 (attention): K and V of 2 heads x 4 per position; layer 1: states x [3, 4, 4, 4] fp32.
    EXPECT_EQ(state.layers[1]->bytes_per_position(), 0u);
    EXPECT_EQ(state.layers[1]->bytes(), size_t(states * 3 * 4 * 4 * 4 * 4));
    EXPECT_EQ(state.bytes_per_position(), size_t(3 * 2 * 2 * 4 * 4));  // for the batch of 3
    const DecodeMemory memory = decode_memory(model, DType::bf16);
    EXPECT_EQ(memory.bytes_per_position, size_t(2 * 2 * 4 * 2));
    EXPECT_EQ(memory.state_layers, 1);
    EXPECT_EQ(memory.state_kinds, std::vector<std::string>{"dsla"});
    EXPECT_EQ(memory.state_bytes, size_t(states * 4 * 4 * 4 * 4));  // fp32 whatever the activations
    EXPECT_EQ(memory.kv_bytes_saved_per_position, size_t(2 * 2 * 4 * 2));
  }
  ModelConfig dense = hybrid();
  dense.layers.clear();
  EXPECT_EQ(decode_memory(Decoder(dense), DType::f32).state_layers, 0);
}

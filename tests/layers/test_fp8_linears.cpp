// train.precision fp8's choice of layers (layers/linear.h use_fp8_linears): every projection of the blocks,
// not the LM head, not MoD's router and predictor, not a linear whose width is no multiple of 16; and a
// switched Linear's forward is linear_fp8.
#include <gtest/gtest.h>

#include <algorithm>

#include "autograd/ops.h"
#include "layers/decoder.h"
#include "layers/linear.h"
#include "layers/mod_config.h"
#include "tests/support/op_test_util.h"

using namespace fathom;
using namespace fathom::test;

namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

TEST(Fp8Linears, EveryBlockProjectionButNotTheHead) {
  Decoder model({.d_model = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 64, .vocab_size = 64});
  const Fp8Linears chosen = use_fp8_linears(model);
  EXPECT_EQ(chosen.fp8.size(), 14u);  // q, k, v, o, gate, up, down in each of 2 blocks
  EXPECT_TRUE(chosen.kept.empty());
  for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.o_proj",
                           "model.layers.0.mlp.gate_proj", "model.layers.1.mlp.down_proj"})
    EXPECT_TRUE(contains(chosen.fp8, name)) << name;
  EXPECT_FALSE(contains(chosen.fp8, "lm_head"));
}

TEST(Fp8Linears, WidthsNotAMultipleOf16StayOut) {
  Decoder model({.d_model = 32, .n_layers = 1, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 24, .vocab_size = 64});
  const Fp8Linears chosen = use_fp8_linears(model);
  EXPECT_EQ(chosen.fp8.size(), 4u);
  EXPECT_EQ(chosen.kept, (std::vector<std::string>{"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj",
                                                   "model.layers.0.mlp.down_proj"}));
}

TEST(Fp8Linears, ModRoutersAndPredictorsStayOut) {
  ModelConfig config{.d_model = 128, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 256, .vocab_size = 64};
  config.options.get<ModConfig>().capacity = 0.5;
  config.options.get<ModConfig>().every = 2;
  Decoder model(config);
  const Fp8Linears chosen = use_fp8_linears(model);
  for (const std::string& name : chosen.fp8) EXPECT_EQ(name.find(".mod."), std::string::npos) << name;
  for (const std::string& name : chosen.kept) EXPECT_EQ(name.find(".mod."), std::string::npos) << name;
  EXPECT_EQ(chosen.fp8.size(), 14u);
}

TEST(Fp8Linears, ASwitchedLinearRunsLinearFp8) {
  Linear layer(32, 16, ParameterInit::normal(0.5, 3.0));
  Tensor weight = layer.weight().value();  // shares the parameter's storage
  weight.copy_from(random_tensor({16, 32}, DType::f32, 1));
  const Variable x(random_tensor({5, 32}, DType::f32, 2));
  const std::vector<float> plain = layer.forward(x).value().to_vector<float>();
  EXPECT_EQ(plain, linear(x, layer.weight()).value().to_vector<float>());
  layer.set_fp8(true);
  EXPECT_EQ(layer.forward(x).value().to_vector<float>(), linear_fp8(x, layer.weight()).value().to_vector<float>());
  EXPECT_NE(layer.forward(x).value().to_vector<float>(), plain);
}

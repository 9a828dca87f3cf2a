#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/decoder.h"
#include "layers/model_config.h"

using namespace fathom;

namespace {

std::string error_of(const ModelConfig& config) {
  try {
    config.validate();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "validate() accepted an inconsistent config";
  return "";
}

// The trainable tensors of an OLMo2 decoder, written out one by one as HF names them.
int64_t count_by_listing_tensors(const ModelConfig& c) {
  const int64_t d = c.d_model, kv = c.n_kv_heads * (c.d_model / c.n_heads);
  std::vector<std::pair<int64_t, int64_t>> shapes = {{c.vocab_size, d}};  // model.embed_tokens
  for (int64_t layer = 0; layer < c.n_layers; ++layer) {
    shapes.push_back({d, d});   // q_proj
    shapes.push_back({kv, d});  // k_proj
    shapes.push_back({kv, d});  // v_proj
    shapes.push_back({d, d});   // o_proj
    if (c.qk_norm) {
      shapes.push_back({d, 1});   // q_norm
      shapes.push_back({kv, 1});  // k_norm
    }
    shapes.push_back({d, 1});             // post_attention_layernorm (input_layernorm for pre-norm)
    shapes.push_back({d, 1});             // post_feedforward_layernorm (post_attention_layernorm for pre-norm)
    shapes.push_back({c.ffn_hidden, d});  // gate_proj
    shapes.push_back({c.ffn_hidden, d});  // up_proj
    shapes.push_back({d, c.ffn_hidden});  // down_proj
  }
  shapes.push_back({d, 1});             // model.norm
  shapes.push_back({c.vocab_size, d});  // lm_head
  int64_t total = 0;
  for (const auto& [rows, cols] : shapes) total += rows * cols;
  return total;
}

}  // namespace

TEST(ModelConfig, NamedSizesFollowTheOlmoCoreLadder) {
  struct Rung {
    const char* name;
    int64_t d, layers, heads, ffn;
  };
  const Rung ladder[] = {{"olmo2_14M", 128, 4, 8, 512},     {"olmo2_30M", 256, 4, 8, 768},
                         {"olmo2_60M", 384, 8, 8, 1536},    {"olmo2_100M", 512, 12, 8, 2048},
                         {"olmo2_190M", 768, 12, 12, 3072}, {"olmo2_370M", 1024, 16, 16, 4096},
                         {"olmo2_1B", 2048, 16, 16, 8192}};
  ASSERT_EQ(model_size_names().size(), std::size(ladder));
  for (const Rung& rung : ladder) {
    SCOPED_TRACE(rung.name);
    const ModelConfig c = named_model_size(rung.name);
    EXPECT_EQ(c.d_model, rung.d);
    EXPECT_EQ(c.n_layers, rung.layers);
    EXPECT_EQ(c.n_heads, rung.heads);
    EXPECT_EQ(c.n_kv_heads, rung.heads);
    EXPECT_EQ(c.ffn_hidden, rung.ffn);
    EXPECT_EQ(c.vocab_size, 100352);
    EXPECT_EQ(c.norm, "post");
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.rope_theta, 500000);
    EXPECT_EQ(c.head_dim() * c.n_heads, c.d_model);
    EXPECT_NO_THROW(c.validate());
  }
}

TEST(ModelConfig, UnknownSizeListsKnownNamesAndClosest) {
  try {
    named_model_size("olmo2_15M");
    FAIL() << "an unknown size was accepted";
  } catch (const Error& e) {
    const std::string message = e.message();
    EXPECT_NE(message.find("unknown model size 'olmo2_15M'"), std::string::npos) << message;
    EXPECT_NE(message.find("did you mean 'olmo2_14M'?"), std::string::npos) << message;
    for (const std::string& name : model_size_names()) EXPECT_NE(message.find(name), std::string::npos) << message;
  }
  // Nothing close: the list, and no misleading suggestion.
  try {
    named_model_size("gpt2");
    FAIL() << "an unknown size was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message().find("did you mean"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("olmo2_1B"), std::string::npos) << e.message();
  }
}

TEST(ModelConfig, ValidateNamesFieldsAndValues) {
  ModelConfig base = named_model_size("olmo2_14M");

  ModelConfig c = base;
  c.d_model = 100;
  EXPECT_EQ(error_of(c), "d_model (100) must be divisible by n_heads (8)");

  c = base;
  c.n_kv_heads = 3;
  EXPECT_EQ(error_of(c), "n_heads (8) must be divisible by n_kv_heads (3)");

  c = base;
  c.d_model = 24;  // head_dim 3
  EXPECT_NE(error_of(c).find("head_dim = d_model / n_heads = 24 / 8 = 3 must be even"), std::string::npos);

  c = base;
  c.n_layers = 0;
  EXPECT_EQ(error_of(c), "n_layers must be positive, got 0");

  c = base;
  c.vocab_size = -5;
  EXPECT_EQ(error_of(c), "vocab_size must be positive, got -5");

  c = base;
  c.norm = "middle";
  EXPECT_EQ(error_of(c), "norm must be one of post, pre; got 'middle'");

  c = base;
  c.norm_eps = 0;
  EXPECT_EQ(error_of(c), "norm_eps must be positive, got 0");
}

TEST(ModelConfig, ParameterCountOfOlmo2_14MByHand) {
  // d 128, L 4, H 8 (= KV heads), FFN 512, V 100352, QK-norm, untied head:
  //   embeddings + lm_head     2 * 100352 * 128           = 25,690,112
  //   per layer: q,k,v,o       4 * 128 * 128              =     65,536
  //              q/k norms     128 + 128                  =        256
  //              2 norms       2 * 128                    =        256
  //              gate,up,down  3 * 128 * 512              =    196,608  -> 262,656 per layer
  //   4 layers                                            =  1,050,624
  //   final norm                                          =        128
  EXPECT_EQ(parameter_count(named_model_size("olmo2_14M")), 26'740'864);
}

TEST(ModelConfig, ParameterCountMatchesTensorListing) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 40; ++trial) {
    ModelConfig c;
    c.n_kv_heads = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    c.n_heads = c.n_kv_heads * std::uniform_int_distribution<int64_t>(1, 4)(rng);
    c.d_model = c.n_heads * 2 * std::uniform_int_distribution<int64_t>(1, 16)(rng);
    c.n_layers = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    c.ffn_hidden = std::uniform_int_distribution<int64_t>(1, 700)(rng);
    c.vocab_size = std::uniform_int_distribution<int64_t>(2, 5000)(rng);
    c.qk_norm = trial % 2 == 0;
    c.norm = trial % 3 == 0 ? "pre" : "post";
    ASSERT_NO_THROW(c.validate());
    EXPECT_EQ(parameter_count(c), count_by_listing_tensors(c)) << "trial " << trial;
  }
}

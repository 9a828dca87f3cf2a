// HF parity: tiny random models saved by transformers (scripts/make_hf_fixtures.py, committed under
// tests/fixtures/hf/) give the same fp32 logits in fathom after import.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "autograd/grad_mode.h"
#include "layers/decoder.h"
#include "layers/hf_import.h"
#include "layers/parameter_arena.h"

using namespace fathom;

namespace {

const std::string kFixtures = std::string(FATHOM_SOURCE_DIR) + "/tests/fixtures/hf/";

Tensor tensor_in(const std::string& file, const std::string& name) { return read_safetensors(file).load(name); }

Tensor fathom_logits(const HfModel& hf, const Tensor& ids) {
  NoGrad no_grad;
  Decoder model(hf.config);
  ParameterArena arena(model, Device::cpu());
  arena.load(hf.weights, "fixture");
  return model.logits(ids).value();
}

// Printed as well as checked, so the test log records how close the match is.
double relative_l2(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    diff += (double(g[i]) - w[i]) * (double(g[i]) - w[i]);
    norm += double(w[i]) * w[i];
  }
  const double rel = std::sqrt(diff / norm);
  std::printf("    relative L2 vs transformers: %.3e\n", rel);
  return rel;
}

struct Fixture {
  HfModel model;
  Tensor ids, logits;
};

Fixture load_fixture(const std::string& name) {
  const std::string dir = kFixtures + name;
  return {load_hf_model(dir), tensor_in(dir + "/io.safetensors", "input_ids"),
          tensor_in(dir + "/io.safetensors", "logits")};
}

}  // namespace

TEST(HfParity, Olmo2LogitsMatchTransformers) {
  const Fixture f = load_fixture("olmo2");
  EXPECT_EQ(f.model.architecture, "Olmo2ForCausalLM");
  EXPECT_EQ(f.model.config.n_kv_heads * 3, f.model.config.n_heads);
  const Tensor logits = fathom_logits(f.model, f.ids);
  ASSERT_EQ(logits.shape(), f.logits.shape());
  EXPECT_LE(relative_l2(logits, f.logits), 1e-4);
}

TEST(HfParity, Llama3RopeScalingLogitsMatchTransformers) {
  const Fixture f = load_fixture("llama3_rope");  // stored in BF16
  EXPECT_EQ(f.model.architecture, "LlamaForCausalLM");
  EXPECT_EQ(f.model.config.rope_scaling.type, "llama3");
  const Tensor logits = fathom_logits(f.model, f.ids);
  EXPECT_LE(relative_l2(logits, f.logits), 1e-4);
  // The scaling matters at these positions: without it the logits are clearly off.
  HfModel unscaled = f.model;
  unscaled.config.rope_scaling = RopeScaling{};
  EXPECT_GT(relative_l2(fathom_logits(unscaled, f.ids), f.logits), 1e-3);
}

TEST(HfParity, TiedLlamaLogitsMatchTransformers) {
  const Fixture f = load_fixture("llama_tied");  // stored in F16
  EXPECT_TRUE(f.model.config.tie_embeddings);
  const Tensor logits = fathom_logits(f.model, f.ids);
  EXPECT_LE(relative_l2(logits, f.logits), 1e-4);
}

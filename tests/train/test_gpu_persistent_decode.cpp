// The persistent decoding kernel (kernels/decode_step/persistent_decode.h) through its decoding step
// (train/generate/persistent_step.h): at every step its logits are within bf16's tolerance of the layer-by-layer
// GPU step's and as close to the CPU decoder's (f32, the reference) as those are, on OLMo2 and Llama blocks, head dims
// 64 and 128, 1 to 4 query heads a KV head, widths 512 to 8192 (1 to 10 rows a stage), uneven vocabularies, positions
// across the cache's tiles and splits (merged at both head dims); the keys and values it writes are the layer-by-layer
// step's. Replayed from a CUDA graph it gives the eager steps' bits, greedy generation through it follows the full
// forward, and a model it does not fit says why and decodes layer by layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "data/tokenizer.h"
#include "layers/parameter_arena.h"
#include "tests/support/gpu_generation_models.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/norm_gains.h"
#include "train/generate/decode_step.h"
#include "train/generate/generator.h"
#include "train/generate/persistent_step.h"

using namespace fathom;
using namespace fathom::test;

namespace {

constexpr uint64_t kSeed = 23;

struct Case {
  std::string name;
  ModelConfig config;
  int64_t prompt, steps;
};

ModelConfig config_of(int64_t d, int64_t layers, int64_t heads, int64_t kv_heads, int64_t ffn, int64_t vocab,
                      const std::string& norm, bool qk_norm) {
  return {.d_model = d,
          .n_layers = layers,
          .n_heads = heads,
          .n_kv_heads = kv_heads,
          .ffn_hidden = ffn,
          .vocab_size = vocab,
          .norm = norm,
          .qk_norm = qk_norm};
}

std::vector<Case> cases() {
  return {// OLMo2 blocks, head dim 64, MHA; positions 60 to 69 cross the first 64-key tile.
          {"olmo2/d64/G1", config_of(512, 3, 8, 8, 1024, 1000, "post", true), 60, 10},
          // Llama blocks, 4 query heads a KV head, an FFN that splits unevenly over the SMs.
          {"llama/d64/G4", config_of(512, 2, 8, 2, 768, 777, "pre", false), 30, 6},
          // Head dim 128, 3 query heads a KV head, d_model 768.
          {"olmo2/d128/G3", config_of(768, 2, 6, 2, 1536, 257, "post", true), 5, 4},
          // Head dim 128 with pre-norm and QK-norm, 2 a KV head.
          {"pre/d128/G2", config_of(512, 2, 4, 2, 1024, 300, "pre", true), 130, 3},
          // A long cache: 1100 positions over 8 KV heads, several tiles a split.
          {"olmo2/long", config_of(512, 2, 8, 8, 512, 500, "post", true), 1100, 3},
          // A long cache over one KV head of 128 with 4 query heads: 18 splits merged, pre-norm, no QK-norm.
          {"llama/d128/G4/long", config_of(512, 2, 4, 1, 768, 400, "pre", false), 1100, 3},
          // Widths of 2048 and 8192 (4 rows and 1 row a stage), then 4096 (2 rows a stage, 2 vectors a lane).
          {"wide/2048", config_of(2048, 1, 16, 16, 8192, 300, "post", true), 20, 3},
          {"wide/4096", config_of(4096, 1, 32, 8, 4096, 300, "pre", true), 8, 2}};
}

std::vector<int32_t> prompt_ids(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % size_t(vocab));
  return ids;
}

Tensor f32_host(const Tensor& t) { return t.to(DType::f32).to(Device::cpu()); }

// The first `n` positions of every head of a [1, Hk, capacity, d] cache, as F32 on the host.
Tensor held_positions(const Tensor& cache, int64_t n) {
  const int64_t Hk = cache.dim(1), capacity = cache.dim(2), d = cache.dim(3);
  std::vector<float> out;
  for (int64_t h = 0; h < Hk; ++h) {
    const std::vector<float> rows = f32_host(cache.view({Hk * capacity, d}).narrow(h * capacity, n)).to_vector<float>();
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return Tensor::from_vector(out, {Hk, n, d});
}

}  // namespace

#ifdef FATHOM_WITH_CUDA
TEST(GpuPersistentDecode, StepsMatchTheCpuDecoderAndTheLayerByLayerStep) {
  FATHOM_REQUIRE_GPU();
  PersistentDecodeScope on(Toggle::on);
  for (const Case& c : cases()) {
    GpuModel m(c.config, kSeed);
    Decoder cpu_model(c.config);
    ParameterArena cpu_arena(cpu_model, Device::cpu());
    cpu_arena.initialise(kSeed);
    randomise_norm_gains(cpu_model);  // as GpuModel sets the GPU model's
    NoGrad no_grad;
    const int64_t capacity = c.prompt + c.steps + 1;
    DecodeState layered = m.model.start_decoding(1, capacity, DType::bf16, kGpu);
    DecodeState persistent = m.model.start_decoding(1, capacity, DType::bf16, kGpu);
    DecodeState host = cpu_model.start_decoding(1, capacity, DType::f32, Device::cpu());
    const Tensor prompt = Tensor::from_vector(prompt_ids(c.prompt, c.config.vocab_size), {1, c.prompt});
    m.model.decode(prompt.to(kGpu), layered);
    m.model.decode(prompt.to(kGpu), persistent);
    cpu_model.decode(prompt, host);
    std::string reason;
    const auto step = PersistentStep::make(m.model, persistent, &reason);
    ASSERT_TRUE(step) << c.name << ": " << reason;
    for (int64_t s = 0; s < c.steps; ++s) {
      const Tensor ids = Tensor::from_vector(std::vector<int32_t>{int32_t((s * 53 + 7) % c.config.vocab_size)}, {1, 1});
      const std::string at = c.name + " at position " + std::to_string(persistent.longest());
      const Tensor want = last_logits(cpu_model, cpu_model.decode(ids, host)).to(DType::f32);
      const Tensor layer_by_layer = f32_host(last_logits(m.model, m.model.decode(ids.to(kGpu), layered)));
      const Tensor got = f32_host(step->logits(ids.to(kGpu)));
      // bf16 weights and activations drift from the f32 reference by a percent or so over a few layers: the
      // persistent step may drift as far as the layer-by-layer one, not further.
      const double drift = relative_l2(got, want), layered_drift = relative_l2(layer_by_layer, want);
      EXPECT_LE(drift, 1.25 * layered_drift + 2e-3) << at << ": persistent against the CPU";
      EXPECT_LE(layered_drift, 3e-2) << at << ": layer by layer against the CPU";
      EXPECT_GPU_CLOSE(got, layer_by_layer, DType::bf16, at + ": persistent against layer by layer");
      EXPECT_EQ(persistent.lengths, layered.lengths) << at;
    }
    EXPECT_EQ(persistent.device_lengths.to(Device::cpu()).to_vector<int32_t>(),
              std::vector<int32_t>{int32_t(c.prompt + c.steps)})
        << c.name;
    // The keys and values it wrote (RoPE'd, normalised) are the layer-by-layer step's.
    for (size_t l = 0; l < persistent.layers.size(); ++l) {
      const auto [k, v] = *persistent.layers[l]->key_value();
      const auto [k_ref, v_ref] = *layered.layers[l]->key_value();
      const int64_t n = c.prompt + c.steps;
      EXPECT_GPU_CLOSE(held_positions(k, n), held_positions(k_ref, n), DType::bf16,
                       c.name + ": keys of layer " + std::to_string(l));
      EXPECT_GPU_CLOSE(held_positions(v, n), held_positions(v_ref, n), DType::bf16,
                       c.name + ": values of layer " + std::to_string(l));
    }
  }
}

TEST(GpuPersistentDecode, GraphedStepsEqualEagerOnesBitForBit) {
  FATHOM_REQUIRE_GPU();
  PersistentDecodeScope on(Toggle::on);
  const Case c = cases()[1];
  GpuModel m(c.config, kSeed);
  NoGrad no_grad;
  const Tensor prompt = Tensor::from_vector(prompt_ids(c.prompt, c.config.vocab_size), {1, c.prompt}).to(kGpu);
  DecodeState eager = m.model.start_decoding(1, c.prompt + 12, DType::bf16, kGpu);
  DecodeState graphed = m.model.start_decoding(1, c.prompt + 12, DType::bf16, kGpu);
  m.model.decode(prompt, eager);
  m.model.decode(prompt, graphed);
  DecodeStep by_eager(m.model, eager, true, false), by_graph(m.model, graphed, true, true);
  ASSERT_TRUE(by_eager.persistent()) << by_eager.persistent_reason();
  ASSERT_TRUE(by_graph.persistent()) << by_graph.persistent_reason();
  std::vector<int32_t> next{5};
  for (int s = 0; s < 10; ++s) {
    const DecodeStep::Output a = by_eager.run(next);
    const Tensor a_logits = a.logits.to(Device::cpu()), a_ids = a.ids.to(Device::cpu());
    const DecodeStep::Output g = by_graph.run(next);
    EXPECT_TRUE(bitwise_equal(g.logits, a_logits)) << "step " << s;
    EXPECT_TRUE(bitwise_equal(g.ids, a_ids)) << "step " << s;
    next = a_ids.to_vector<int32_t>();
  }
  EXPECT_TRUE(by_graph.graphed()) << by_graph.eager_reason();
  EXPECT_EQ(graphed.lengths, eager.lengths);
}

TEST(GpuPersistentDecode, GreedyGenerationFollowsTheFullForward) {
  FATHOM_REQUIRE_GPU();
  PersistentDecodeScope on(Toggle::on);
  const auto tokenizer = make_tokenizer("bytes");
  const std::vector<uint32_t> prompt{84, 104, 101, 32, 115, 101, 97};
  for (const std::string norm : {"post", "pre"}) {
    GpuModel m(config_of(512, 2, 8, 4, 1024, 257, norm, norm == "post"), kSeed);
    NoGrad no_grad;
    const GenerationOptions options{.max_new_tokens = 12, .sampling = {.temperature = 0}};
    const GenerationResult r = generate(m.model, *tokenizer, prompt, options, DType::bf16, kGpu);
    EXPECT_TRUE(r.persistent) << norm << ": " << r.persistent_reason;
    const int64_t V = m.model.config().vocab_size;
    std::vector<int32_t> seq(prompt.begin(), prompt.end());
    for (uint32_t token : r.tokens[0]) {
      const int64_t T = int64_t(seq.size());
      const std::vector<float> all =
          f32_host(m.model.logits(Tensor::from_vector(seq, {1, T}).to(kGpu)).value()).to_vector<float>();
      const std::vector<float> last(all.end() - V, all.end());
      const float best = *std::max_element(last.begin(), last.end());
      EXPECT_GE(last[token], best - 2e-2f * (1.0f + std::abs(best))) << norm << " after " << T << " tokens";
      seq.push_back(int32_t(token));
    }
  }
}

TEST(GpuPersistentDecode, AModelItDoesNotFitSaysWhyAndDecodesLayerByLayer) {
  FATHOM_REQUIRE_GPU();
  PersistentDecodeScope on(Toggle::on);
  NoGrad no_grad;
  const std::vector<std::pair<ModelConfig, std::string>> unfit = {
      {gpu_small("post", true, {.variant = MoDAVariant::attn_kv}), "MoDA"},
      {config_of(128, 2, 2, 2, 512, 257, "post", true), "d_model 128"},
      {config_of(512, 2, 32, 8, 512, 257, "post", true), "head dim 16"},
      {config_of(512, 2, 8, 1, 512, 257, "post", true), "8 query heads over 1 KV heads"}};
  for (const auto& [config, why] : unfit) {
    GpuModel m(config, kSeed);
    DecodeState state = m.model.start_decoding(1, 8, DType::bf16, kGpu);
    m.model.decode(Tensor::from_vector(std::vector<int32_t>{1, 2}, {1, 2}).to(kGpu), state);
    DecodeStep step(m.model, state, true, true);
    EXPECT_FALSE(step.persistent()) << why;
    EXPECT_NE(step.persistent_reason().find(why), std::string::npos) << step.persistent_reason();
    EXPECT_EQ(step.run({3}).logits.dim(1), config.vocab_size) << why;
  }
  // Two sequences: the kernel decodes one.
  GpuModel m(config_of(512, 2, 8, 8, 512, 257, "post", true), kSeed);
  DecodeState two = m.model.start_decoding(2, 8, DType::bf16, kGpu);
  m.model.decode(Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {2, 2}).to(kGpu), two);
  std::string reason;
  EXPECT_FALSE(PersistentStep::make(m.model, two, &reason));
  EXPECT_NE(reason.find("2 sequences"), std::string::npos) << reason;
  // Off, nothing runs through it.
  PersistentDecodeScope off(Toggle::off);
  DecodeState one = m.model.start_decoding(1, 8, DType::bf16, kGpu);
  m.model.decode(Tensor::from_vector(std::vector<int32_t>{1, 2}, {1, 2}).to(kGpu), one);
  EXPECT_FALSE(PersistentStep::make(m.model, one, &reason));
  EXPECT_NE(reason.find("FATHOM_PERSISTENT_DECODE is off"), std::string::npos) << reason;
}
#endif

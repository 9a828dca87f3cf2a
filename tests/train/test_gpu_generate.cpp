// Generation on the GPU (bf16 weights and activations, the KV cache and decode-attention kernels):
// greedy decoding equals the argmax of a full forward at every step (up to bf16 near-ties), and
// chunked decoding matches the full forward's hidden states, for OLMo2, Llama-style, MoDA and
// attention + dsla models; and so does each prompt of a ragged batch (prompts of different lengths
// decoded together), whose hidden states match the prompt decoded alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "data/tokenizer.h"
#include "layers/dsla_config.h"
#include "layers/parameter_arena.h"
#include "tests/support/gpu_generation_models.h"
#include "tests/support/gpu_test_util.h"
#include "train/generate/generator.h"

using namespace fathom;
using namespace fathom::test;

namespace {

// Layer 1 of 3 a dsla layer (gamma per head with two states).
ModelConfig gpu_hybrid(int64_t states, const std::string& norm = "post") {
  ModelConfig c = gpu_small(norm, norm == "post");
  c.layers = {"attention", "dsla", "attention"};
  c.options.get<DslaConfig>() = {.states = states, .gamma = states == 2 ? DslaGamma::head : DslaGamma::layer};
  return c;
}

constexpr uint64_t kSeed = 31;

std::vector<std::pair<std::string, ModelConfig>> gpu_cases() {
  return {{"olmo2", gpu_small("post", true)},
          {"llama", gpu_small("pre", false)},
          {"attn_kv", gpu_small("post", true, {.variant = MoDAVariant::attn_kv})},
          {"attn_kv+ffn_kv", gpu_small("post", true, {.variant = MoDAVariant::attn_kv_ffn_kv})},
          {"extra/reader",
           gpu_small("pre", true, {.variant = MoDAVariant::extra_attn_kv_ffn_kv, .depth_key = DepthKey::reader})},
          // Hybrids: the dsla layer's chunked prefill and step kernels (head dim 64, G = 3).
          {"dsla/2_states", gpu_hybrid(2)},
          {"dsla/1_state/pre", gpu_hybrid(1, "pre")},
          // Head dim 16: no decode kernel; the host reference decodes it.
          {"olmo2/d16",
           {.d_model = 96, .n_layers = 2, .n_heads = 6, .n_kv_heads = 3, .ffn_hidden = 128, .vocab_size = 257}}};
}

// Each of `tokens`, generated greedily after `prompt`, is the argmax of the full forward over the prompt and
// the tokens before it, or within a bf16 near-tie of it.
void expect_follows_full_forward(const Decoder& model, const std::vector<uint32_t>& prompt,
                                 const std::vector<uint32_t>& tokens, const std::string& label) {
  const int64_t V = model.config().vocab_size;
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  for (uint32_t token : tokens) {
    const int64_t T = int64_t(seq.size());
    const std::vector<float> all = model.logits(Tensor::from_vector(seq, {1, T}).to(kGpu))
                                       .value()
                                       .to(DType::f32)
                                       .to(Device::cpu())
                                       .to_vector<float>();
    const std::vector<float> last(all.end() - V, all.end());
    const float best = *std::max_element(last.begin(), last.end());
    EXPECT_GE(last[token], best - 2e-2f * (1.0f + std::abs(best))) << label << " after " << T << " tokens";
    seq.push_back(int32_t(token));
  }
}

}  // namespace

TEST(GpuGenerate, GreedyEqualsTheArgmaxOfAFullForward) {
  FATHOM_REQUIRE_GPU();
  const auto tokenizer = make_tokenizer("bytes");
  const std::vector<uint32_t> prompt{84, 104, 101, 32, 115, 101, 97};
  for (const auto& [name, config] : gpu_cases()) {
    GpuModel m(config, kSeed);
    NoGrad no_grad;
    const GenerationOptions options{.max_new_tokens = 12, .sampling = {.temperature = 0}};
    const GenerationResult r = generate(m.model, *tokenizer, prompt, options, DType::bf16, kGpu);
    expect_follows_full_forward(m.model, prompt, r.tokens[0], name);
  }
}

TEST(GpuGenerate, ChunkedDecodingMatchesTheFullForward) {
  FATHOM_REQUIRE_GPU();
  for (const auto& [name, config] : gpu_cases()) {
    GpuModel m(config, kSeed);
    NoGrad no_grad;
    std::vector<int32_t> ids(45);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % 257);
    const Tensor full = m.model.forward(Tensor::from_vector(ids, {1, 45}).to(kGpu)).hidden.value();
    DecodeState state = m.model.start_decoding(1, 64, DType::bf16, kGpu);
    std::vector<Tensor> pieces;
    for (auto [from, n] : {std::pair{0, 40}, {40, 3}, {43, 1}, {44, 1}}) {
      const std::vector<int32_t> chunk(ids.begin() + from, ids.begin() + from + n);
      pieces.push_back(
          m.model.decode(Tensor::from_vector(chunk, {1, n}).to(kGpu), state).value().to(DType::f32).to(Device::cpu()));
    }
    std::vector<float> got;
    for (const Tensor& p : pieces) {
      const std::vector<float> v = p.to_vector<float>();
      got.insert(got.end(), v.begin(), v.end());
    }
    const Tensor joined = Tensor::from_vector(got, full.shape());
    EXPECT_GPU_CLOSE(joined, full.to(DType::f32).to(Device::cpu()), DType::bf16, name);
  }
}

namespace {

// Lengths 1, 5, 13, 2 and 70 (past a 64-key tile).
std::vector<std::vector<uint32_t>> ragged_prompts() {
  std::vector<std::vector<uint32_t>> prompts;
  for (int64_t n : {1, 5, 13, 2, 70}) {
    std::vector<uint32_t> p(static_cast<size_t>(n));
    for (size_t i = 0; i < p.size(); ++i) p[i] = uint32_t((i * 41 + size_t(n) * 3 + 7) % 256);
    prompts.push_back(p);
  }
  return prompts;
}

}  // namespace

TEST(GpuGenerate, EachPromptOfARaggedBatchFollowsItsFullForward) {
  FATHOM_REQUIRE_GPU();
  const auto tokenizer = make_tokenizer("bytes");
  const auto prompts = ragged_prompts();
  for (const auto& [name, config] : gpu_cases()) {
    GpuModel m(config, kSeed);
    NoGrad no_grad;
    const GenerationOptions options{.max_new_tokens = 16, .sampling = {.temperature = 0}, .ignore_eos = true};
    const GenerationResult r = generate_batch(m.model, *tokenizer, prompts, options, DType::bf16, kGpu);
    ASSERT_EQ(r.tokens.size(), prompts.size());
    for (size_t p = 0; p < prompts.size(); ++p) {
      ASSERT_EQ(r.tokens[p].size(), 16u) << name;
      expect_follows_full_forward(m.model, prompts[p], r.tokens[p], name + ": prompt " + std::to_string(p));
    }
  }
}

TEST(GpuGenerate, ARaggedStateMatchesEachSequenceDecodedAlone) {
  FATHOM_REQUIRE_GPU();
  const auto prompts = ragged_prompts();
  const int64_t B = int64_t(prompts.size()), capacity = 80;
  for (const auto& [name, config] : gpu_cases()) {
    GpuModel m(config, kSeed);
    NoGrad no_grad;
    DecodeState batch = m.model.start_decoding(B, capacity, DType::bf16, kGpu);
    std::vector<DecodeState> alone;
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int32_t> ids(prompts[size_t(b)].begin(), prompts[size_t(b)].end());
      const Tensor input = Tensor::from_vector(ids, {1, int64_t(ids.size())}).to(kGpu);
      DecodeState one = m.model.start_decoding(1, int64_t(ids.size()), DType::bf16, kGpu);
      m.model.decode(input, one);
      batch.take_sequence(b, one);
      alone.push_back(m.model.start_decoding(1, capacity, DType::bf16, kGpu));
      m.model.decode(input, alone.back());
    }
    for (int64_t T : {1, 1, 1, 3}) {
      std::vector<int32_t> ids;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) ids.push_back(int32_t((b * 31 + t * 7 + batch.lengths[size_t(b)]) % 256));
      const Tensor together =
          m.model.decode(Tensor::from_vector(ids, {B, T}).to(kGpu), batch).value().to(DType::f32).to(Device::cpu());
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<int32_t> own(ids.begin() + ptrdiff_t(b * T), ids.begin() + ptrdiff_t((b + 1) * T));
        const Tensor want = m.model.decode(Tensor::from_vector(own, {1, T}).to(kGpu), alone[size_t(b)])
                                .value()
                                .to(DType::f32)
                                .to(Device::cpu());
        EXPECT_GPU_CLOSE(together.narrow(b, 1), want, DType::bf16, name + ": sequence " + std::to_string(b));
      }
    }
  }
}

// Generation (train/generate/generator.h, Decoder::decode): greedy decoding with the caches equals the argmax
// of a full forward over the sequence so far at every step, for OLMo2, a Llama-style model, every
// MoDA variant and attention + dsla hybrids (one and two states); chunked prefill; the sampler; clear
// errors.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "data/tokenizer.h"
#include "kernels/argmax/argmax.h"
#include "kernels/attention/kv_cache.h"
#include "layers/dsla_config.h"
#include "layers/moda_config.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"
#include "train/generate/generator.h"
#include "train/generate/inference_model.h"
#include "train/generate/sampler.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

ModelConfig small(const std::string& norm, bool qk_norm, MoDAConfig moda = {}) {
  ModelConfig c = fathom::testing::byte_vocab_model(norm, qk_norm, /*n_layers=*/3);
  c.options.get<MoDAConfig>() = moda;
  return c;
}

struct Case {
  std::string name;
  ModelConfig config;
};

std::vector<Case> cases() {
  std::vector<Case> out{{"olmo2", small("post", true)}, {"llama", small("pre", false)}};
  for (MoDAVariant v : {MoDAVariant::attn_kv, MoDAVariant::attn_kv_ffn_kv, MoDAVariant::extra_attn_kv_ffn_kv})
    for (DepthKey key : {DepthKey::writer, DepthKey::reader})
      out.push_back({name_of(v) + "/" + name_of(key), small("post", true, {.variant = v, .depth_key = key})});
  out.push_back(
      {"attn_kv+ffn_kv/pre/max_slots_3", small("pre", true, {.variant = MoDAVariant::attn_kv_ffn_kv, .max_slots = 3})});
  // Hybrids: layer 1 of 3 is dsla, with its constant state instead of a KV cache.
  for (int64_t states : {1, 2}) {
    ModelConfig hybrid = small(states == 2 ? "post" : "pre", states == 2);
    hybrid.layers = {"attention", "dsla", "attention"};
    hybrid.options.get<DslaConfig>() = {.states = states, .gamma = states == 2 ? DslaGamma::head : DslaGamma::layer};
    out.push_back({"dsla/" + std::to_string(states) + "_states", hybrid});
  }
  return out;
}

// The full forward's logits at the last position of `ids`.
std::vector<float> full_last_logits(const Decoder& model, const std::vector<int32_t>& ids) {
  const int64_t T = int64_t(ids.size()), V = model.config().vocab_size;
  const std::vector<float> all = model.logits(Tensor::from_vector(ids, {1, T})).value().to_vector<float>();
  return std::vector<float>(all.end() - V, all.end());
}

}  // namespace

TEST(Generate, GreedyEqualsTheArgmaxOfAFullForwardAtEveryStep) {
  const auto tokenizer = make_tokenizer("bytes");
  const std::vector<uint32_t> prompt{72, 101, 108, 108, 111};
  for (const Case& c : cases()) {
    fathom::testing::SeededModel m(c.config, 21);
    NoGrad no_grad;
    GenerationOptions options{.max_new_tokens = 8, .sampling = {.temperature = 0}};
    const GenerationResult r = generate(m.model, *tokenizer, prompt, options, DType::f32, Device::cpu());
    ASSERT_FALSE(r.tokens[0].empty()) << c.name;
    std::vector<int32_t> seq(prompt.begin(), prompt.end());
    for (uint32_t token : r.tokens[0]) {
      const std::vector<float> logits = full_last_logits(m.model, seq);
      const int64_t argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
      ASSERT_EQ(int64_t(token), argmax) << c.name << " after " << seq.size() << " tokens";
      seq.push_back(int32_t(token));
    }
    // Attention layers x K,V x Hk x d x f32; a dsla layer's states do not grow.
    const size_t attention_layers = c.config.layers.empty() ? 3 : 2;
    EXPECT_EQ(r.cache_bytes_per_position, attention_layers * 2 * 2 * 4 * 4) << c.name;
  }
}

// A HuggingFace folder (hf:DIR, as `fathom generate --checkpoint hf:DIR` opens it) decodes like its full
// forward too: the tiny OLMo2 fixture of the parity tests, its ids (vocab 97) decoded as bytes.
TEST(Generate, AHuggingFaceFolderDecodesAsItsFullForward) {
  const ModelFiles files = read_model_files("hf:" + std::string(FATHOM_SOURCE_DIR) + "/tests/fixtures/hf/olmo2");
  const InferenceModel inference(files.config, files.weights, files.origin, Device::cpu(), false);
  const auto tokenizer = make_tokenizer("bytes");
  const std::vector<uint32_t> prompt{5, 17, 42, 3};
  NoGrad no_grad;
  GenerationOptions options{.max_new_tokens = 6, .sampling = {.temperature = 0}};
  const GenerationResult r = generate(inference.decoder(), *tokenizer, prompt, options, DType::f32, Device::cpu());
  ASSERT_EQ(r.tokens[0].size(), 6u);
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  for (uint32_t token : r.tokens[0]) {
    const std::vector<float> logits = full_last_logits(inference.decoder(), seq);
    ASSERT_EQ(int64_t(token), std::max_element(logits.begin(), logits.end()) - logits.begin()) << seq.size();
    seq.push_back(int32_t(token));
  }
}

TEST(Generate, CachesThatCannotFitAreAClearError) {
  const DecodeMemory kv{.bytes_per_position = 1024}, hybrid{.bytes_per_position = 1024, .state_bytes = 4096};
  EXPECT_EQ(check_decoding_caches_fit(kv, 4, 100, size_t(1) << 30, "cuda:0"), size_t(1024 * 4 * 100));
  EXPECT_EQ(check_decoding_caches_fit(hybrid, 4, 100, size_t(1) << 30, "cuda:0"), size_t((1024 * 100 + 4096) * 4));
  const DecodeMemory large{.bytes_per_position = 1 << 20};
  expect_error([&] { check_decoding_caches_fit(large, 64, 1 << 20, size_t(8) << 30, "cuda:0"); },
               {"decoding caches for 64 x 1048576 positions need", "cuda:0 has 8.00 GiB free",
                "lower --batch or --max-new-tokens"});
  expect_error([&] { check_decoding_caches_fit(kv, 0, 10, 1 << 20, "cpu"); }, {"at least one sequence"});
}

TEST(Generate, ChunkedDecodingSeesWhatTheFullForwardSees) {
  for (const Case& c : cases()) {
    fathom::testing::SeededModel m(c.config, 5);
    NoGrad no_grad;
    const std::vector<int32_t> ids{3, 99, 41, 7, 250, 18, 64};
    const Tensor full = m.model.forward(Tensor::from_vector(ids, {1, 7})).hidden.value();
    DecodeState state = m.model.start_decoding(1, 9, DType::f32, Device::cpu());
    // A prompt of 3, then 3 at once (decode attention with Tq > 1), then 1.
    std::vector<float> pieces;
    for (auto [from, n] : {std::pair{0, 3}, {3, 3}, {6, 1}}) {
      const std::vector<int32_t> chunk(ids.begin() + from, ids.begin() + from + n);
      const std::vector<float> h = m.model.decode(Tensor::from_vector(chunk, {1, n}), state).value().to_vector<float>();
      pieces.insert(pieces.end(), h.begin(), h.end());
    }
    EXPECT_EQ(state.lengths, std::vector<int64_t>{7});
    const std::vector<float> expected = full.to_vector<float>();
    ASSERT_EQ(pieces.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(pieces[i], expected[i], 1e-4) << c.name << " at " << i;
    expect_error(
        [&] {
          m.model.decode(Tensor::from_vector(std::vector<int32_t>{1, 2, 3}, {1, 3}), state);
        },
        {"capacity of 9"});
  }
}

TEST(Generate, BatchesSamplesOfOnePromptAndStops) {
  const auto tokenizer = make_tokenizer("bytes");
  fathom::testing::SeededModel m(small("post", true), 8);
  const std::vector<uint32_t> prompt{65, 66};
  GenerationOptions greedy{.max_new_tokens = 5, .batch = 3, .sampling = {.temperature = 0}};
  const GenerationResult r = generate(m.model, *tokenizer, prompt, greedy, DType::f32, Device::cpu());
  ASSERT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.tokens[0], r.tokens[1]);
  EXPECT_EQ(r.tokens[0], r.tokens[2]);
  GenerationOptions sampled{.max_new_tokens = 6, .batch = 2, .sampling = {.temperature = 1.0, .seed = 4}};
  const GenerationResult a = generate(m.model, *tokenizer, prompt, sampled, DType::f32, Device::cpu());
  const GenerationResult b = generate(m.model, *tokenizer, prompt, sampled, DType::f32, Device::cpu());
  EXPECT_EQ(a.tokens, b.tokens);  // a seed reproduces a generation
  // Stop text: the continuation ends before it.
  if (r.texts[0].size() >= 2) {
    GenerationOptions stopping = greedy;
    stopping.stop = r.texts[0].substr(1, 1);
    const GenerationResult s = generate(m.model, *tokenizer, prompt, stopping, DType::f32, Device::cpu());
    EXPECT_EQ(s.texts[0].find(stopping.stop), std::string::npos);
  }
  expect_error([&] { generate(m.model, *tokenizer, {}, greedy, DType::f32, Device::cpu()); }, {"no tokens"});
  expect_error([&] { generate(m.model, *tokenizer, {300}, greedy, DType::f32, Device::cpu()); },
               {"the prompt's token 300", "vocabulary of 257"});
  GenerationOptions bad = greedy;
  bad.sampling.top_p = 0;
  expect_error([&] { generate(m.model, *tokenizer, prompt, bad, DType::f32, Device::cpu()); }, {"--top-p"});
}

TEST(Sampler, GreedyTopKTopPAndSeeds) {
  const std::vector<float> logits{1.0f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(sample_token(logits, {.temperature = 0}, 0), 1);  // ties go to the lower index
  EXPECT_EQ(sample_token(logits, {.temperature = 1, .top_k = 1}, 7), 1);
  EXPECT_EQ(sample_token(logits, {.temperature = 1, .top_p = 1e-6}, 7), 1);
  // With top_k = 2 only ids 1 and 2 come up; a seed and draw index give one answer.
  std::vector<int> counts(4, 0);
  for (uint64_t i = 0; i < 2000; ++i)
    ++counts[size_t(sample_token(logits, {.temperature = 1, .top_k = 2, .seed = 3}, i))];
  EXPECT_EQ(counts[0] + counts[3], 0);
  EXPECT_NEAR(counts[1] / 2000.0, 0.5, 0.05);
  EXPECT_EQ(sample_token(logits, {.temperature = 1, .seed = 9}, 5),
            sample_token(logits, {.temperature = 1, .seed = 9}, 5));
  // Full softmax: p(1) = e^3 / (e^1 + 2 e^3 + e^-2).
  std::fill(counts.begin(), counts.end(), 0);
  for (uint64_t i = 0; i < 4000; ++i) ++counts[size_t(sample_token(logits, {.temperature = 1, .seed = 1}, i))];
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-2.0);
  EXPECT_NEAR(counts[0] / 4000.0, std::exp(1.0) / z, 0.03);
  expect_error([&] { SamplingOptions{.temperature = -1}.validate(); }, {"--temperature"});
  expect_error([&] { SamplingOptions{.top_k = -2}.validate(); }, {"--top-k"});
}

TEST(Generate, StreamsWholeUtf8Characters) {
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("a\xC3"), 1u);             // the lead byte of a 2-byte character
  EXPECT_EQ(complete_utf8_prefix("a\xC3\xA9"), 3u);         // é, whole
  EXPECT_EQ(complete_utf8_prefix("a\xE2\x82"), 1u);         // 2 of the 3 bytes of €
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98\x80"), 4u);  // 😀, whole
}

TEST(KvCache, WritesRowsIntoTheHeadMajorCache) {
  Tensor cache = Tensor::zeros({2, 3, 5, 4}, DType::f32);
  const Tensor rows = fathom::test::random_tensor({2, 2, 3, 4}, DType::f32, 3);
  kv_cache_write(cache, rows, 2);
  const std::vector<float> c = cache.to_vector<float>(), r = rows.to_vector<float>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t p = 0; p < 5; ++p)
        for (int64_t i = 0; i < 4; ++i) {
          const float got = c[size_t(((b * 3 + h) * 5 + p) * 4 + i)];
          const float want = (p == 2 || p == 3) ? r[size_t(((b * 2 + (p - 2)) * 3 + h) * 4 + i)] : 0.0f;
          ASSERT_EQ(got, want);
        }
  expect_error([&] { kv_cache_write(cache, rows, 4); }, {"overrun", "capacity of 5"});
  expect_error([&] { kv_cache_write(cache, Tensor::zeros({2, 1, 2, 4}, DType::f32), 0); }, {"do not fit"});
}

TEST(ArgmaxRows, LowestIndexWinsTiesAndNaNsAreSkipped) {
  const float nan = std::nanf("");
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 5, 5, 2, nan, -1, 7, nan, nan, nan, nan, nan}, {3, 4});
  EXPECT_EQ(argmax_rows(x).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 0}));
  expect_error([&] { argmax_rows(Tensor::zeros({4}, DType::f32)); }, {"argmax_rows", "[rows, n]"});
}

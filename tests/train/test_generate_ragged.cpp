// Batches of different prompts (train/generate/generator.h: generate_batch, DecodeState::take_sequence):
// prompts of 1, 5, 13 and 2 tokens decoded as one batch give each prompt the tokens it gets decoded alone,
// greedy and seeded sampling, for OLMo2, MoDA, MoD (causal predictor) and attention + dsla models, with
// one sample per prompt and with two; a ragged decoding state's hidden states equal each sequence's
// decoded alone, through steps and a chunk; draws are numbered per sequence; clear errors.
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "data/tokenizer.h"
#include "layers/dsla_config.h"
#include "layers/mod_config.h"
#include "layers/moda_config.h"
#include "tests/support/model_test_helpers.h"
#include "tests/support/test_support.h"
#include "train/generate/generator.h"
#include "train/generate/sampler.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

ModelConfig small(const std::string& norm = "post") {
  return fathom::testing::byte_vocab_model(norm, /*qk_norm=*/norm == "post", /*n_layers=*/4);
}

struct Case {
  std::string name;
  ModelConfig config;
};

std::vector<Case> cases() {
  std::vector<Case> out{{"olmo2", small()}};
  ModelConfig moda = small();
  moda.options.get<MoDAConfig>() = {.variant = MoDAVariant::attn_kv_ffn_kv};
  out.push_back({"moda/attn_kv+ffn_kv", moda});
  ModelConfig moda_reader = small("pre");
  moda_reader.options.get<MoDAConfig>() = {
      .variant = MoDAVariant::extra_attn_kv_ffn_kv, .max_slots = 3, .depth_key = DepthKey::reader};
  out.push_back({"moda/extra/reader", moda_reader});
  ModelConfig mod = small();
  mod.options.get<ModConfig>() = {.capacity = 0.5, .every = 2, .causal = ModCausal::predictor};
  out.push_back({"mod/predictor", mod});
  for (int64_t states : {1, 2}) {
    ModelConfig hybrid = small(states == 2 ? "post" : "pre");
    hybrid.layers = {"attention", "dsla", "attention", "dsla"};
    hybrid.options.get<DslaConfig>() = {.states = states, .gamma = states == 2 ? DslaGamma::head : DslaGamma::layer};
    out.push_back({"dsla/" + std::to_string(states) + "_states", hybrid});
  }
  return out;
}

std::vector<std::vector<uint32_t>> ragged_prompts() {
  return {{72}, {84, 104, 101, 32, 85}, {73, 110, 32, 116, 104, 101, 32, 98, 101, 103, 105, 110, 110}, {65, 66}};
}

// The rows [b] of a [B, T, d] tensor.
std::vector<float> row(const Tensor& t, int64_t b) {
  const std::vector<float> all = t.to_vector<float>();
  const size_t n = all.size() / size_t(t.dim(0));
  return std::vector<float>(all.begin() + ptrdiff_t(size_t(b) * n), all.begin() + ptrdiff_t(size_t(b + 1) * n));
}

}  // namespace

TEST(GenerateRagged, EachPromptOfABatchDecodesAsItDoesAlone) {
  const auto tokenizer = make_tokenizer("bytes");
  const auto prompts = ragged_prompts();
  const std::vector<std::pair<std::string, SamplingOptions>> samplings{
      {"greedy", {.temperature = 0}}, {"sampled", {.temperature = 0.9, .top_k = 40, .seed = 7}}};
  for (const Case& c : cases()) {
    fathom::testing::SeededModel m(c.config, 23);
    for (const auto& [how, sampling] : samplings) {
      for (int64_t samples : {1, 2}) {
        const GenerationOptions options{
            .max_new_tokens = 17, .batch = samples, .sampling = sampling, .ignore_eos = true};
        const GenerationResult together =
            generate_batch(m.model, *tokenizer, prompts, options, DType::f32, Device::cpu());
        ASSERT_EQ(together.tokens.size(), prompts.size() * size_t(samples));
        EXPECT_EQ(together.prompt_tokens, 21);
        EXPECT_EQ(together.prefill_tokens, 21);
        for (size_t p = 0; p < prompts.size(); ++p) {
          const GenerationResult alone = generate(m.model, *tokenizer, prompts[p], options, DType::f32, Device::cpu());
          for (int64_t s = 0; s < samples; ++s) {
            const size_t r = p * size_t(samples) + size_t(s);
            ASSERT_EQ(together.tokens[r].size(), 17u) << c.name;
            EXPECT_EQ(together.tokens[r], alone.tokens[size_t(s)])
                << c.name << " " << how << ": prompt " << p << " sample " << s << " of " << samples;
            EXPECT_EQ(together.texts[r], alone.texts[size_t(s)]) << c.name;
          }
        }
      }
    }
  }
}

// A sampled prompt draws the same whatever else shares its batch: the draws are numbered per sample
// and step, and sample 0 draws what a batch of one always did.
TEST(GenerateRagged, DrawsAreNumberedBySampleAndStep) {
  EXPECT_EQ(draw_index(5, 0), 5u);
  EXPECT_EQ(draw_index(5, 1), (uint64_t(1) << 32) + 5);
  EXPECT_NE(draw_index(0, 1), draw_index(1, 0));
  expect_error([] { draw_index(-1, 0); }, {"step -1", "[0, 2^32)"});
  expect_error([] { draw_index(0, int64_t(1) << 32); }, {"sample 4294967296"});
  // The samples of one prompt still differ from each other.
  const auto tokenizer = make_tokenizer("bytes");
  fathom::testing::SeededModel m(small(), 4);
  const GenerationOptions options{.max_new_tokens = 12, .batch = 3, .sampling = {.temperature = 1.5, .seed = 2}};
  const GenerationResult r = generate(m.model, *tokenizer, {70, 71}, options, DType::f32, Device::cpu());
  EXPECT_FALSE(r.tokens[0] == r.tokens[1] && r.tokens[1] == r.tokens[2]);
}

TEST(GenerateRagged, ARaggedStateSeesWhatEachSequenceAloneSees) {
  const auto prompts = ragged_prompts();
  const int64_t B = int64_t(prompts.size()), capacity = 20;
  for (const Case& c : cases()) {
    fathom::testing::SeededModel m(c.config, 9);
    NoGrad no_grad;
    DecodeState batch = m.model.start_decoding(B, capacity, DType::f32, Device::cpu());
    std::vector<DecodeState> alone;
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int32_t> ids(prompts[size_t(b)].begin(), prompts[size_t(b)].end());
      const int64_t P = int64_t(ids.size());
      DecodeState one = m.model.start_decoding(1, P, DType::f32, Device::cpu());
      m.model.decode(Tensor::from_vector(ids, {1, P}), one);
      batch.take_sequence(b, one);
      alone.push_back(m.model.start_decoding(1, capacity, DType::f32, Device::cpu()));
      m.model.decode(Tensor::from_vector(ids, {1, P}), alone.back());
    }
    EXPECT_EQ(batch.lengths, (std::vector<int64_t>{1, 5, 13, 2}));
    EXPECT_EQ(batch.device_lengths.to_vector<int32_t>(), (std::vector<int32_t>{1, 5, 13, 2}));
    // Three single steps, then a chunk of two (decode attention with Tq = 2 at four lengths).
    for (int64_t T : {1, 1, 1, 2}) {
      std::vector<int32_t> ids;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) ids.push_back(int32_t((b * 31 + t * 7 + batch.lengths[size_t(b)] * 3) % 256));
      const Tensor together = m.model.decode(Tensor::from_vector(ids, {B, T}), batch).value();
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<int32_t> own(ids.begin() + ptrdiff_t(b * T), ids.begin() + ptrdiff_t((b + 1) * T));
        const std::vector<float> want =
            m.model.decode(Tensor::from_vector(own, {1, T}), alone[size_t(b)]).value().to_vector<float>();
        const std::vector<float> got = row(together, b);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5) << c.name << ": sequence " << b << " at " << batch.lengths[size_t(b)];
      }
    }
    EXPECT_EQ(batch.lengths, (std::vector<int64_t>{6, 10, 18, 7}));
    expect_error(
        [&] {
          m.model.decode(Tensor::from_vector(std::vector<int32_t>(size_t(B) * 3, 1), {B, 3}), batch);
        },
        {"3 more positions after 18", "capacity of 20"});
  }
}

TEST(GenerateRagged, BadPromptsAndStatesAreClearErrors) {
  const auto tokenizer = make_tokenizer("bytes");
  fathom::testing::SeededModel m(small(), 3);
  const GenerationOptions options{.max_new_tokens = 4, .sampling = {.temperature = 0}};
  expect_error([&] { generate_batch(m.model, *tokenizer, {}, options, DType::f32, Device::cpu()); }, {"no prompts"});
  expect_error(
      [&] {
        generate_batch(m.model, *tokenizer, {{1, 2}, {}}, options, DType::f32, Device::cpu());
      },
      {"prompt 2 encodes to no tokens"});
  expect_error(
      [&] {
        generate_batch(m.model, *tokenizer, {{1}, {2}, {3, 400}}, options, DType::f32, Device::cpu());
      },
      {"prompt 3's token 400", "vocabulary of 257"});
  GenerationOptions huge = options;
  huge.max_new_tokens = (int64_t(1) << 31) - 2;
  expect_error(
      [&] {
        generate_batch(m.model, *tokenizer, {{1}, {2, 3, 4}}, huge, DType::f32, Device::cpu());
      },
      {"prompt 2's 3 tokens", "2^31 - 1 positions"});
  NoGrad no_grad;
  DecodeState batch = m.model.start_decoding(2, 8, DType::f32, Device::cpu());
  DecodeState two = m.model.start_decoding(2, 8, DType::f32, Device::cpu());
  expect_error([&] { batch.take_sequence(0, two); }, {"one-sequence state", "batch of 2"});
  DecodeState one = m.model.start_decoding(1, 9, DType::f32, Device::cpu());
  m.model.decode(Tensor::from_vector(std::vector<int32_t>(9, 5), {1, 9}), one);
  expect_error([&] { batch.take_sequence(2, one); }, {"row 2 outside the batch of 2"});
  expect_error([&] { batch.take_sequence(0, one); }, {"a sequence of 9 positions exceeds the capacity of 8"});
  // A kind whose state cannot take a sequence says so.
  struct Bare final : MixerCache {
    size_t bytes() const override { return 0; }
    size_t bytes_per_position() const override { return 0; }
  };
  Bare bare;
  expect_error([&] { bare.copy_sequence(0, Bare()); }, {"cannot take a sequence prefilled alone", "one prompt"});
}

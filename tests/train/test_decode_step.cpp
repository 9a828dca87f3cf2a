// Decoding's device-held position count (kernels/attention/kv_cache.h) on the host: the cache write at the
// counted position, the step's positions and the count's advance; the decode-attention overload that
// reads the count; which decoding states can be replayed as a CUDA graph; and DecodeStep on the CPU,
// which stays eager and equals Decoder::decode. The graph itself is tested on the GPU
// (tests/train/test_gpu_decode_step.cpp).
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/kv_cache.h"
#include "layers/mod_config.h"
#include "layers/parameter_arena.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/norm_gains.h"
#include "tests/support/op_test_util.h"
#include "tests/support/test_support.h"
#include "train/generate/decode_step.h"

using namespace fathom;
using fathom::testing::expect_error;

namespace {

Tensor count(int32_t n) { return Tensor::from_vector(std::vector<int32_t>{n}, {1}); }

ModelConfig small(ModConfig mod = {}) {
  ModelConfig c{.d_model = 24, .n_layers = 3, .n_heads = 6, .n_kv_heads = 2, .ffn_hidden = 40, .vocab_size = 257};
  c.options.get<ModConfig>() = mod;
  return c;
}

struct HostModel {
  explicit HostModel(const ModelConfig& c) : model(c), arena(model, Device::cpu()) { arena.initialise(5); }
  Decoder model;
  ParameterArena arena;
};

// Decoding steps of two prompts of ragged lengths, each read alone and taken into the batch: the last logits of
// three token steps, in order.
std::vector<float> ragged_step_logits(const Decoder& model) {
  DecodeState state = model.start_decoding(2, 12, DType::f32, Device::cpu());
  const std::vector<std::vector<int32_t>> prompts{{3, 90, 17, 4}, {8, 9}};
  for (size_t b = 0; b < prompts.size(); ++b) {
    DecodeState one = model.start_decoding(1, 12, DType::f32, Device::cpu());
    model.decode(Tensor::from_vector(prompts[b], {1, int64_t(prompts[b].size())}), one);
    state.take_sequence(int64_t(b), one);
  }
  std::vector<float> logits;
  for (int32_t t : {5, 6, 7}) {
    const Tensor out =
        last_logits(model, model.decode(Tensor::from_vector(std::vector<int32_t>{t, t + 1}, {2, 1}), state));
    const std::vector<float> step = out.to_vector<float>();
    logits.insert(logits.end(), step.begin(), step.end());
  }
  return logits;
}

}  // namespace

TEST(DecodePositions, TheCountedWriteEqualsTheHostOne) {
  const Tensor rows = fathom::test::random_tensor({2, 2, 3, 4}, DType::f32, 3);
  Tensor by_host = Tensor::zeros({2, 3, 5, 4}, DType::f32), by_count = Tensor::zeros({2, 3, 5, 4}, DType::f32);
  kv_cache_write(by_host, rows, 3);
  kv_cache_write(by_count, rows, count(3));
  EXPECT_EQ(by_count.to_vector<float>(), by_host.to_vector<float>());
  expect_error([&] { kv_cache_write(by_count, rows, Tensor::zeros({1}, DType::i64)); },
               {"kv_cache_write", "I32 [1] or I32 [B] = [2]", "I64"});
  expect_error([&] { kv_cache_write(by_count, rows, Tensor::zeros({3}, DType::i32)); },
               {"3 position counts for a batch of 2", "I32 [1] or I32 [B] = [2]"});
  expect_error([&] { kv_cache_write(by_count, rows, Tensor()); }, {"undefined"});
  expect_error(
      [&] {
        kv_cache_write(by_count, Tensor::zeros({2, 6, 3, 4}, DType::f32), count(0));
      },
      {"overrun", "capacity of 5"});
}

TEST(DecodePositions, PositionsFollowTheCountAndAdvanceMovesIt) {
  Tensor past = count(7);
  EXPECT_EQ(positions_after(past, 3).to_vector<int32_t>(), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(positions_after(past, 0).numel(), 0);
  advance_positions(past, 4);
  EXPECT_EQ(past.to_vector<int32_t>(), std::vector<int32_t>{11});
  expect_error([&] { positions_after(past, -1); }, {"positions_after", ">= 0"});
  Tensor wrong = Tensor::zeros({1}, DType::f32);
  expect_error([&] { advance_positions(wrong, 1); }, {"advance_positions", "I32 [1] or I32 [batch]"});
}

TEST(DecodePositions, DecodeAttentionReadsTheLengthFromTheCount) {
  const Tensor q = fathom::test::random_tensor({2, 3, 4, 8}, DType::f32, 1);
  const Tensor k = fathom::test::random_tensor({2, 2, 10, 8}, DType::f32, 2);
  const Tensor v = fathom::test::random_tensor({2, 2, 10, 8}, DType::f32, 3);
  // 5 positions held before the 3 new tokens: length 8.
  const Tensor by_count = decode_attention(q, k, v, count(5), DepthSlots{}, 0.3);
  EXPECT_EQ(by_count.to_vector<float>(), decode_attention(q, k, v, 8, 0.3).to_vector<float>());
  expect_error([&] { decode_attention(q, k, v, Tensor::zeros({1}, DType::i64), DepthSlots{}, 0.3); },
               {"decode_attention", "I32 [1] or I32 [B] = [2]"});
}

TEST(DecodeStep, OnlyStatesWhoseHostSideIsTheirLengthReplay) {
  NoGrad no_grad;
  HostModel dense(small());
  DecodeState state = dense.model.start_decoding(2, 8, DType::f32, Device::cpu());
  EXPECT_TRUE(state.replayable());
  // The CPU's counts on the device are host memory.
  EXPECT_TRUE(state.device_lengths.device() == Device::cpu());
  EXPECT_EQ(state.device_lengths.to_vector<int32_t>(), (std::vector<int32_t>{0, 0}));
  state.set_lengths({5, 3});
  EXPECT_EQ(state.lengths, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(state.longest(), 5);
  EXPECT_EQ(state.shortest(), 3);
  for (const auto& cache : state.layers) EXPECT_EQ(cache->length(), 5);  // the longest sequence's
  expect_error([&] { state.set_lengths({9, 1}); }, {"length 9", "capacity of 8"});
  expect_error([&] { state.set_lengths({1}); }, {"1 lengths for a batch of 2"});
  // dsla's states replay once the prompt made them (in place from then on).
  ModelConfig hybrid = small();
  hybrid.layers = {"attention", "dsla", "attention"};
  HostModel with_dsla(hybrid);
  DecodeState dsla_state = with_dsla.model.start_decoding(1, 8, DType::f32, Device::cpu());
  EXPECT_FALSE(dsla_state.replayable());
  with_dsla.model.decode(Tensor::from_vector(std::vector<int32_t>{4, 5, 6}, {1, 3}), dsla_state);
  EXPECT_TRUE(dsla_state.replayable());
  HostModel routed(small({.capacity = 0.5}));
  DecodeState routed_state = routed.model.start_decoding(2, 8, DType::f32, Device::cpu());
  EXPECT_FALSE(routed_state.replayable());
  expect_error([&] { routed_state.layers[1]->set_lengths({3, 3}); }, {"cannot be replayed"});
}

TEST(DecodeStep, OnTheCpuItStaysEagerAndEqualsDecode) {
  NoGrad no_grad;
  HostModel m(small());
  const std::vector<int32_t> prompt{3, 90, 17, 4};
  DecodeState by_step = m.model.start_decoding(2, 10, DType::f32, Device::cpu());
  DecodeState by_decode = m.model.start_decoding(2, 10, DType::f32, Device::cpu());
  std::vector<int32_t> both(prompt);
  both.insert(both.end(), prompt.begin(), prompt.end());
  m.model.decode(Tensor::from_vector(both, {2, 4}), by_step);
  m.model.decode(Tensor::from_vector(both, {2, 4}), by_decode);
  DecodeStep step(m.model, by_step, true, true);
  for (int32_t t : {5, 6, 7}) {
    const std::vector<int32_t> ids{t, t + 100};
    const DecodeStep::Output out = step.run(ids);
    const Tensor want = last_logits(m.model, m.model.decode(Tensor::from_vector(ids, {2, 1}), by_decode));
    EXPECT_EQ(out.logits.to_vector<float>(), want.to_vector<float>());
    ASSERT_TRUE(out.ids.defined());
    EXPECT_EQ(out.ids.numel(), 2);
  }
  EXPECT_EQ(by_step.lengths, (std::vector<int64_t>{7, 7}));
  EXPECT_FALSE(step.graphed());
  EXPECT_NE(step.eager_reason().find("GPU"), std::string::npos) << step.eager_reason();
  expect_error([&] { step.run({1}); }, {"1 ids for a batch of 2"});
  DecodeState full = m.model.start_decoding(1, 4, DType::f32, Device::cpu());
  m.model.decode(Tensor::from_vector(prompt, {1, 4}), full);
  DecodeState fresh = m.model.start_decoding(1, 4, DType::f32, Device::cpu());
  DecodeStep before_prompt(m.model, fresh, true, true);
  expect_error([&] { before_prompt.run({1}); }, {"read no prompt"});
  DecodeStep at_capacity(m.model, full, false, false);
  expect_error([&] { at_capacity.run({1}); }, {"capacity of 4"});
  EXPECT_NE(at_capacity.eager_reason().find("turned off"), std::string::npos);
}

// Attention's decoding steps with FATHOM_DECODE_PROLOGUE=fused give the separate ops' logits bit for bit
// on the CPU (whose prologue is those ops), with QK-norm (OLMo2) and without (Llama), at ragged lengths.
TEST(DecodeStep, TheFusedPrologueDecodesAsTheSeparateOps) {
  NoGrad no_grad;
  for (const bool qk_norm : {true, false}) {
    ModelConfig c = small();
    c.qk_norm = qk_norm;
    HostModel m(c);
    const auto decode_steps = [&](DecodePrologue choice) {
      fathom::test::DecodePrologueScope scope(choice);
      return ragged_step_logits(m.model);
    };
    EXPECT_EQ(decode_steps(DecodePrologue::fused), decode_steps(DecodePrologue::separate)) << "qk_norm " << qk_norm;
  }
}

// A block hands its last residual step on untaken where FATHOM_RESIDUAL_STEP_ACROSS_LAYERS=fused
// (layers/layer_stream.h): the stream it hands on takes to the block's own output, bit for bit, post-norm and
// pre-norm. On the CPU (where the next block takes the step as its own launch, or pre-norm in its input norm's
// pass) decoding then gives the same logits either way, OLMo2, Llama-style and a dsla hybrid at ragged lengths; on
// the GPU tests/train/test_gpu_decode_step.cpp tests the launch that takes it.
TEST(DecodeStep, AResidualStepHandedOnDecodesAsTheBlocksOwn) {
  NoGrad no_grad;
  HostModel post(small());
  std::vector<float> values(2 * 24);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * float(i % 7) - 0.3f;
  const Tensor x = Tensor::from_vector(values, {1, 2, 24});
  const Tensor positions = Tensor::from_vector(std::vector<int32_t>{0, 1}, {2});
  const MixerInputs inputs{positions};
  const DecoderLayer& block = *post.model.blocks()[0];
  {
    fathom::test::ResidualStepAcrossLayersScope hand_on(Fusion::fused);
    const LayerStream out = block.forward_stream({.x = Variable(x)}, inputs, LayerReport());
    ASSERT_FALSE(out.taken());
    EXPECT_EQ(out.take().value().to_vector<float>(),
              block.forward(Variable(x), inputs, LayerReport()).value().to_vector<float>());
    // The next block takes it (as its own launch on the CPU) as it would take the stream.
    const DecoderLayer& next = *post.model.blocks()[1];
    EXPECT_EQ(next.forward_stream(out, inputs, LayerReport()).take().value().to_vector<float>(),
              next.forward(out.take(), inputs, LayerReport()).value().to_vector<float>());
    ModelConfig pre_config = small();
    pre_config.norm = "pre";
    HostModel pre(pre_config);
    const LayerStream pre_out = pre.model.blocks()[0]->forward_stream({.x = Variable(x)}, inputs, LayerReport());
    ASSERT_FALSE(pre_out.taken());
    EXPECT_EQ(pre_out.norm, nullptr);
    EXPECT_EQ(pre_out.take().value().to_vector<float>(),
              pre.model.blocks()[0]->forward(Variable(x), inputs, LayerReport()).value().to_vector<float>());
    const DecoderLayer& pre_next = *pre.model.blocks()[1];
    EXPECT_EQ(pre_next.forward_stream(pre_out, inputs, LayerReport()).take().value().to_vector<float>(),
              pre_next.forward(pre_out.take(), inputs, LayerReport()).value().to_vector<float>());
    // A stream of the other norm placement is refused, not misread.
    expect_error([&] { pre_next.forward_stream(out, inputs, LayerReport()); }, {"post-norm stream", "pre-norm block"});
    expect_error([&] { next.forward_stream(pre_out, inputs, LayerReport()); }, {"pre-norm stream", "post-norm block"});
  }
  fathom::test::ResidualStepAcrossLayersScope own(Fusion::separate);
  EXPECT_TRUE(block.forward_stream({.x = Variable(x)}, inputs, LayerReport()).taken());

  ModelConfig llama = small(), hybrid = small();
  llama.norm = "pre";
  llama.qk_norm = false;
  hybrid.layers = {"attention", "dsla", "attention"};
  for (const auto& [name, c] : {std::pair{"olmo2", small()}, {"llama", llama}, {"dsla hybrid", hybrid}}) {
    HostModel m(c);
    fathom::test::randomise_norm_gains(m.model);
    const auto decode_steps = [&](Fusion choice) {
      fathom::test::ResidualStepAcrossLayersScope scope(choice);
      return ragged_step_logits(m.model);
    };
    EXPECT_EQ(decode_steps(Fusion::fused), decode_steps(Fusion::separate)) << name;
  }
}

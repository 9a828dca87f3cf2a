// CUDA graphs for decoding (kernels/runtime/backend.h Graph, train/generate/decode_step.h): a captured body runs
// only when replayed, and memory it freed is not handed out while the graph lives; a capture that
// needs the host fails cleanly. A replayed decoding step equals the eager step bit for bit, at every
// step, as the cache grows past tile and split boundaries, for OLMo2, Llama-style, head dim 128, MoDA
// and dsla hybrids at batch 1 to 3, and for ragged batches whose sequences hold different lengths; the
// caches the replays wrote then read the same as the eager ones.
// Head dim 16 (decode attention's host reference) cannot be captured and stays eager with the same
// results; sampling gives the same tokens with and without graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "data/tokenizer.h"
#include "kernels/attention/kv_cache.h"
#include "layers/dsla_config.h"
#include "layers/parameter_arena.h"
#include "tests/support/gpu_generation_models.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/kernel_choice_scope.h"
#include "tests/support/norm_gains.h"
#include "train/generate/decode_step.h"
#include "train/generate/generator.h"

using namespace fathom;
using namespace fathom::test;

namespace {

constexpr uint64_t kSeed = 17;

Tensor host_copy(const Tensor& t) { return t.to(Device::cpu()); }

// Two states that read the same prompts step, one eagerly and one through a graph, on the same tokens
// (the eager side's greedy choices). Returns whether the graphed side replayed.
bool steps_equal(const std::string& name, const GpuModel& m, DecodeState& eager, DecodeState& graphed, int64_t steps) {
  const int64_t B = eager.batch;
  DecodeStep by_eager(m.model, eager, true, false), by_graph(m.model, graphed, true, true);
  std::vector<int32_t> next(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) next[size_t(b)] = int32_t(b * 5 + 40);
  for (int64_t s = 0; s < steps; ++s) {
    const DecodeStep::Output a = by_eager.run(next);
    const Tensor a_logits = host_copy(a.logits), a_ids = host_copy(a.ids);
    const DecodeStep::Output g = by_graph.run(next);
    EXPECT_TRUE(bitwise_equal(g.logits, a_logits)) << name << ": logits at length " << eager.longest();
    EXPECT_TRUE(bitwise_equal(g.ids, a_ids)) << name << ": ids at length " << eager.longest();
    EXPECT_EQ(graphed.lengths, eager.lengths) << name;
    const std::vector<int32_t> chosen = a_ids.to_vector<int32_t>();
    next.assign(chosen.begin(), chosen.end());
  }
  // The caches the replays wrote, and the device-held length they left, read as the eager ones.
  std::vector<int32_t> chunk(static_cast<size_t>(B * 2));
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = int32_t(i * 3 + 1);
  const Tensor chunk_ids = Tensor::from_vector(chunk, {B, 2}).to(kGpu);
  EXPECT_TRUE(bitwise_equal(m.model.decode(chunk_ids, graphed).value(), m.model.decode(chunk_ids, eager).value()))
      << name << ": a chunk after the replays";
  EXPECT_EQ(graphed.device_lengths.to(Device::cpu()).to_vector<int32_t>(),
            std::vector<int32_t>(graphed.lengths.begin(), graphed.lengths.end()));
  EXPECT_FALSE(by_eager.graphed());
  if (!by_graph.graphed()) std::printf("%s: eager, %s\n", name.c_str(), by_graph.eager_reason().c_str());
  return by_graph.graphed();
}

// B sequences read a prompt of P tokens each, then steps_equal.
bool replay_equals_eager(const std::string& name, const ModelConfig& config, int64_t B, int64_t P, int64_t steps,
                         int64_t capacity) {
  GpuModel m(config, kSeed);
  NoGrad no_grad;
  std::vector<int32_t> prompt(static_cast<size_t>(B * P));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % 257);
  const Tensor prompt_ids = Tensor::from_vector(prompt, {B, P}).to(kGpu);
  DecodeState eager = m.model.start_decoding(B, capacity, DType::bf16, kGpu);
  DecodeState graphed = m.model.start_decoding(B, capacity, DType::bf16, kGpu);
  m.model.decode(prompt_ids, eager);
  m.model.decode(prompt_ids, graphed);
  return steps_equal(name, m, eager, graphed, steps);
}

// A ragged batch: prompts of `lengths` tokens, each prefilled alone and taken into its row, then
// steps_equal.
bool ragged_replay_equals_eager(const std::string& name, const ModelConfig& config, const std::vector<int64_t>& lengths,
                                int64_t steps) {
  GpuModel m(config, kSeed);
  NoGrad no_grad;
  const int64_t B = int64_t(lengths.size());
  const int64_t capacity = *std::max_element(lengths.begin(), lengths.end()) + steps + 2;
  DecodeState eager = m.model.start_decoding(B, capacity, DType::bf16, kGpu);
  DecodeState graphed = m.model.start_decoding(B, capacity, DType::bf16, kGpu);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t P = lengths[size_t(b)];
    std::vector<int32_t> prompt(static_cast<size_t>(P));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 29 + size_t(b) * 7 + 3) % 257);
    DecodeState one = m.model.start_decoding(1, P, DType::bf16, kGpu);
    m.model.decode(Tensor::from_vector(prompt, {1, P}).to(kGpu), one);
    eager.take_sequence(b, one);
    graphed.take_sequence(b, one);
  }
  EXPECT_EQ(graphed.device_lengths.to(Device::cpu()).to_vector<int32_t>(),
            std::vector<int32_t>(lengths.begin(), lengths.end()));
  return steps_equal(name, m, eager, graphed, steps);
}

// A small OLMo2 on the GPU and a byte-level prompt, generated with CUDA graphs and without on the same
// options (construct it after FATHOM_REQUIRE_GPU).
struct GraphedAndEager {
  std::unique_ptr<Tokenizer> tokenizer = make_tokenizer("bytes");
  std::vector<uint32_t> prompt{84, 104, 101, 32, 115, 101, 97};
  GpuModel m{gpu_small("post", true), kSeed};
  std::pair<GenerationResult, GenerationResult> operator()(GenerationOptions options) const {
    return of_prompts({prompt}, options);
  }
  // Several prompts as one batch, graphed and eager.
  std::pair<GenerationResult, GenerationResult> of_prompts(const std::vector<std::vector<uint32_t>>& prompts,
                                                           GenerationOptions options) const {
    NoGrad no_grad;
    options.cuda_graphs = true;
    GenerationResult graphed = generate_batch(m.model, *tokenizer, prompts, options, DType::bf16, kGpu);
    options.cuda_graphs = false;
    return {std::move(graphed), generate_batch(m.model, *tokenizer, prompts, options, DType::bf16, kGpu)};
  }
};

}  // namespace

#ifdef FATHOM_WITH_CUDA
TEST(GpuCudaGraph, ACaptureRunsOnlyWhenReplayedAndKeepsWhatItFreed) {
  FATHOM_REQUIRE_GPU();
  Tensor counter = Tensor::zeros({1}, DType::i32, kGpu);
  const void* freed = nullptr;
  std::string reason;
  cuda::Graph graph = cuda::Graph::capture(
      0,
      [&] {
        const Tensor scratch = positions_after(counter, 1000);  // freed inside the capture
        freed = scratch.raw();
        advance_positions(counter, 2);
      },
      &reason);
  ASSERT_TRUE(graph.captured()) << reason;
  EXPECT_EQ(counter.to(Device::cpu()).to_vector<int32_t>(), std::vector<int32_t>{0});  // captured, not run
  // The scratch block stays the graph's: an allocation of its size gets other memory.
  const Tensor other = Tensor::empty({1000}, DType::i32, kGpu);
  EXPECT_NE(other.raw(), freed);
  for (int i = 0; i < 3; ++i) graph.replay();
  EXPECT_EQ(counter.to(Device::cpu()).to_vector<int32_t>(), std::vector<int32_t>{6});
}

TEST(GpuCudaGraph, ACaptureThatNeedsTheHostFailsCleanly) {
  FATHOM_REQUIRE_GPU();
  Tensor counter = Tensor::zeros({1}, DType::i32, kGpu);
  std::string reason;
  cuda::Graph graph = cuda::Graph::capture(
      0,
      [&] {
        advance_positions(counter, 1);
        (void)counter.to(Device::cpu());  // a copy to the host waits for the stream: not in a graph
      },
      &reason);
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(reason.empty());
  expect_error([&] { graph.replay(); }, {"not captured"});
  // The stream works as before, and nothing captured ran.
  advance_positions(counter, 5);
  EXPECT_EQ(counter.to(Device::cpu()).to_vector<int32_t>(), std::vector<int32_t>{5});
}
#endif

TEST(GpuDecodeStep, AReplayedStepEqualsTheEagerStepBitForBit) {
  FATHOM_REQUIRE_GPU();
  // Batch 1 from 60 positions: the cache passes 64 (a second tile, and a second split).
  EXPECT_TRUE(replay_equals_eager("olmo2", gpu_small("post", true), 1, 60, 10, 80));
  EXPECT_TRUE(replay_equals_eager("llama/B3", gpu_small("pre", false), 3, 62, 8, 200));
  ModelConfig d128 = gpu_small("post", true);
  d128.d_model = 256, d128.n_heads = 2, d128.n_kv_heads = 1;  // head dim 128, G = 2
  EXPECT_TRUE(replay_equals_eager("olmo2/d128/B2", d128, 2, 127, 4, 140));
  ModelConfig hybrid = gpu_small("post", true);
  hybrid.layers = {"attention", "dsla", "attention"};
  hybrid.options.get<DslaConfig>() = {.states = 2, .gamma = DslaGamma::head};
  EXPECT_TRUE(replay_equals_eager("dsla/2_states/B2", hybrid, 2, 30, 6, 64));
  // MoDA: equal whether or not its depth reads capture (the reason is printed when they do not).
  replay_equals_eager(
      "moda/extra_reader",
      gpu_small("pre", true, {.variant = MoDAVariant::extra_attn_kv_ffn_kv, .depth_key = DepthKey::reader}), 2, 20, 6,
      64);
}

// Sequences at their own lengths (1 to 130: one tile, a tile tail, several splits) replay as a graph too.
TEST(GpuDecodeStep, ARaggedBatchReplaysBitForBit) {
  FATHOM_REQUIRE_GPU();
  EXPECT_TRUE(ragged_replay_equals_eager("olmo2/ragged", gpu_small("post", true), {1, 9, 130, 63}, 8));
  ModelConfig d128 = gpu_small("post", true);
  d128.d_model = 256, d128.n_heads = 2, d128.n_kv_heads = 1;
  EXPECT_TRUE(ragged_replay_equals_eager("olmo2/d128/ragged", d128, {70, 2, 5}, 6));
  ModelConfig hybrid = gpu_small("pre", false);
  hybrid.layers = {"attention", "dsla", "attention"};
  hybrid.options.get<DslaConfig>() = {.states = 1, .gamma = DslaGamma::layer};
  EXPECT_TRUE(ragged_replay_equals_eager("dsla/ragged", hybrid, {3, 40, 1}, 6));
  ragged_replay_equals_eager("moda/ragged", gpu_small("post", true, {.variant = MoDAVariant::attn_kv_ffn_kv}),
                             {12, 1, 33}, 5);
}

// Dependent launches (FATHOM_DEPENDENT_LAUNCH) change no bit of a decoding step: with the decoding paths
// on (skinny GEMM, fused prologue and residual step), a step replayed from a graph captured with them
// equals an eager step without them, Llama-style and OLMo2, at batch 2.
TEST(GpuDecodeStep, DependentLaunchesChangeNoBit) {
  FATHOM_REQUIRE_GPU();
  SkinnyPolicyScope skinny(SkinnyMatmulPolicy::automatic);
  DecodePrologueScope prologue(DecodePrologue::fused);
  AddRmsNormScope residual_step(Fusion::fused);
  for (const bool llama : {true, false}) {
    const std::string name = llama ? "llama" : "olmo2";
    GpuModel m(llama ? gpu_small("pre", false) : gpu_small("post", true), kSeed);
    NoGrad no_grad;
    std::vector<int32_t> prompt(40);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % 257);
    const Tensor prompt_ids = Tensor::from_vector(prompt, {2, 20}).to(kGpu);
    DecodeState ordinary = m.model.start_decoding(2, 40, DType::bf16, kGpu);
    DecodeState dependent = m.model.start_decoding(2, 40, DType::bf16, kGpu);
    m.model.decode(prompt_ids, ordinary);
    m.model.decode(prompt_ids, dependent);
    DecodeStep by_ordinary(m.model, ordinary, true, false), by_dependent(m.model, dependent, true, true);
    std::vector<int32_t> next{40, 45};
    for (int s = 0; s < 6; ++s) {
      Tensor logits, ids;
      {
        DependentLaunchScope off(Toggle::off);
        const DecodeStep::Output a = by_ordinary.run(next);
        logits = host_copy(a.logits), ids = host_copy(a.ids);
      }
      DependentLaunchScope on(Toggle::on);
      const DecodeStep::Output d = by_dependent.run(next);
      EXPECT_TRUE(bitwise_equal(d.logits, logits)) << name << ": logits at step " << s;
      EXPECT_TRUE(bitwise_equal(d.ids, ids)) << name << ": ids at step " << s;
      const std::vector<int32_t> chosen = ids.to_vector<int32_t>();
      next.assign(chosen.begin(), chosen.end());
    }
    EXPECT_TRUE(by_dependent.graphed()) << name << ": " << by_dependent.eager_reason();
  }
}

namespace {

// c's model (its norm gains away from 1, as GpuModel sets them) and two decoding states of
// batch B that have read the same 12-token prompt, with room for `room` more positions: one for each of two paths to
// compare.
struct PromptedTwice {
  PromptedTwice(const ModelConfig& c, int64_t B, int64_t room)
      : m(c, kSeed),
        first(m.model.start_decoding(B, 12 + room, DType::bf16, kGpu)),
        second(m.model.start_decoding(B, 12 + room, DType::bf16, kGpu)) {
    NoGrad no_grad;
    std::vector<int32_t> prompt(size_t(B * 12));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 41 + 5) % 257);
    const Tensor prompt_ids = Tensor::from_vector(prompt, {B, 12}).to(kGpu);
    m.model.decode(prompt_ids, first);
    m.model.decode(prompt_ids, second);
  }
  GpuModel m;
  DecodeState first, second;
};

// Greedy decoding steps of c at batch B after a 12-token prompt: a graphed run with Scope(kOn) in force (the
// fused path) against an eager run with Scope(kOff), the logits bit for bit at every step; the graphed run must
// have been captured where must_capture.
template <typename Scope, auto kOff = Fusion::separate, auto kOn = Fusion::fused>
void expect_fusion_changes_no_bit(const std::string& name, const ModelConfig& c, int64_t B, int steps,
                                  bool must_capture = true) {
  PromptedTwice run(c, B, steps + 8);
  NoGrad no_grad;
  DecodeStep by_separate(run.m.model, run.first, true, false), by_fused(run.m.model, run.second, true, true);
  std::vector<int32_t> next(size_t(B), 40);
  for (int s = 0; s < steps; ++s) {
    Tensor logits;
    {
      Scope off(kOff);
      logits = host_copy(by_separate.run(next).logits);
    }
    Scope on(kOn);
    const DecodeStep::Output f = by_fused.run(next);
    EXPECT_TRUE(bitwise_equal(f.logits, logits)) << name << ": logits at step " << s;
    const std::vector<int32_t> chosen = host_copy(f.ids).to_vector<int32_t>();
    next.assign(chosen.begin(), chosen.end());
  }
  if (must_capture) {
    EXPECT_TRUE(by_fused.graphed()) << name << ": " << by_fused.eager_reason();
  }
}

std::string model_name(bool llama, int64_t B) {
  return std::string(llama ? "llama" : "olmo2") + "/B" + std::to_string(B);
}

}  // namespace

// The MLP's gate, up and SwiGLU in one launch (skinny_swiglu) change no bit of a decoding step against the
// grouped products and the SwiGLU kernel, at batch 1 and 3, OLMo2 and Llama-style: with the block's residual step
// in its own launch, and in that launch too (skinny_swiglu_after_residual_step at batch 1, against the step in
// gate/up's launch, then the SwiGLU kernel).
TEST(GpuDecodeStep, TheFusedSwigluProjectionChangesNoBit) {
  FATHOM_REQUIRE_GPU();
  SkinnyPolicyScope skinny(SkinnyMatmulPolicy::automatic);
  AddRmsNormScope one_pass(Fusion::fused);  // the pre-norm step's launch repeats the one pass
  for (const Fusion step_in_gemm : {Fusion::separate, Fusion::fused}) {
    ResidualStepScope step(step_in_gemm);
    const std::string where = step_in_gemm == Fusion::fused ? ", the step in the launch" : "";
    for (const bool llama : {true, false})
      for (const int64_t B : {1, 3})
        expect_fusion_changes_no_bit<SwigluProjectionScope>(
            model_name(llama, B) + where, llama ? gpu_small("pre", false) : gpu_small("post", true), B, 5);
  }
  // The fused path is taken at all: a decoding step's MLP input gets one.
  NoGrad no_grad;
  SwigluProjectionScope on(Fusion::fused);
  const GpuInput x = random_input({1, 1, 64}, DType::bf16, 5), w = random_input({96, 64}, DType::bf16, 6);
  EXPECT_TRUE(fused_swiglu_projection(Variable(x.gpu), Variable(w.gpu), Variable(w.gpu)).has_value());
  ResidualStepScope step_in_gemm(Fusion::fused);
  const GpuInput r = random_input({1, 1, 384}, DType::bf16, 7), g = random_input({384}, DType::bf16, 8),
                 gate = random_input({96, 384}, DType::bf16, 9);
  EXPECT_TRUE(swiglu_projection_after_residual_step(ResidualStep::post_norm, Variable(r.gpu), Variable(r.gpu),
                                                    Variable(g.gpu), 1e-5, Variable(gate.gpu), Variable(gate.gpu))
                  .has_value());
}

// The decode prologue inside attention's split kernel (FATHOM_PROLOGUE_IN_ATTENTION) changes no bit of a
// decoding step against its own launch, at batch 1 and 3, OLMo2 (QK-norm) and Llama-style, at head dims 64
// (G = 3) and 128 (G = 2), over 60 steps (past 64 positions: the step's key moves into a second split).
TEST(GpuDecodeStep, ThePrologueInsideAttentionChangesNoBit) {
  FATHOM_REQUIRE_GPU();
  DecodePrologueScope prologue(DecodePrologue::fused);
  for (const bool llama : {true, false})
    for (const int64_t d_model : {384, 256})
      for (const int64_t B : {1, 3}) {
        ModelConfig c = llama ? gpu_small("pre", false) : gpu_small("post", true);
        if (d_model == 256) c.d_model = 256, c.n_heads = 2, c.n_kv_heads = 1;  // head dim 128, G = 2
        expect_fusion_changes_no_bit<PrologueInAttentionScope>(model_name(llama, B) + "/d" + std::to_string(d_model), c,
                                                               B, 60);
      }
}

// A block's residual step inside the MLP's gate/up launch (FATHOM_RESIDUAL_STEP_IN_GEMM) changes no bit of
// a decoding step against the step's own kernel, at batch 1 (the launch's one row) and 3 (which it leaves to
// the step's kernel), OLMo2 (post-norm) and Llama-style (pre-norm, against the one-pass add_rms_norm); and
// the fused launch is taken at all.
TEST(GpuDecodeStep, TheResidualStepInsideTheMlpsLaunchChangesNoBit) {
  FATHOM_REQUIRE_GPU();
  SkinnyPolicyScope skinny(SkinnyMatmulPolicy::automatic);
  AddRmsNormScope one_pass(Fusion::fused);
  SwigluProjectionScope separate_swiglu(Fusion::separate);
  for (const bool llama : {true, false})
    for (const int64_t B : {1, 3})
      expect_fusion_changes_no_bit<ResidualStepScope>(model_name(llama, B),
                                                      llama ? gpu_small("pre", false) : gpu_small("post", true), B, 5);
  NoGrad no_grad;
  ResidualStepScope on(Fusion::fused);
  const GpuInput x = random_input({1, 1, 384}, DType::bf16, 7), w = random_input({96, 384}, DType::bf16, 8),
                 g = random_input({384}, DType::bf16, 9);
  const Variable weight(w.gpu);
  const Variable* weights[] = {&weight};
  EXPECT_TRUE(project_after_residual_step(ResidualStep::post_norm, Variable(x.gpu), Variable(x.gpu), Variable(g.gpu),
                                          1e-5, weights)
                  .has_value());
}

namespace {

// Eager decoding steps of c at batch B after a 12-token prompt, the same ids fed either way, with a pre-norm block's
// last residual step taken by the block (separate) and handed on (fused): the logits within bf16 rounding of each
// other at every step.
void expect_handed_on_pre_norm_step_close(const std::string& name, const ModelConfig& c, int64_t B, int steps) {
  PromptedTwice run(c, B, steps);
  NoGrad no_grad;
  for (int s = 0; s < steps; ++s) {
    const Tensor ids = Tensor::full({B, 1}, double((s * 37 + 3) % 257), DType::i32).to(kGpu);
    Tensor want;
    {
      ResidualStepAcrossLayersScope off(Fusion::separate);
      want = host_copy(run.m.model.decode(ids, run.first).value());
    }
    ResidualStepAcrossLayersScope on(Fusion::fused);
    expect_close(host_copy(run.m.model.decode(ids, run.second).value()), want, 2e-2, 2e-2,
                 name + ": logits at step " + std::to_string(s));
  }
}

}  // namespace

namespace {

// The choices the tests of a step handed across layers hold: the skinny GEMM, the step inside the q/k/v launch, the
// one-pass add_rms_norm, SwiGLU apart.
struct AcrossLayersChoices {
  SkinnyPolicyScope skinny{SkinnyMatmulPolicy::automatic};
  ResidualStepScope in_gemm{Fusion::fused};
  AddRmsNormScope one_pass{Fusion::fused};
  SwigluProjectionScope separate_swiglu{Fusion::separate};
};

// A stream handed on by the first block of c's model (its norm gains away from 1), for x [1, 1, 384] at position 0.
struct HandedStream {
  explicit HandedStream(const ModelConfig& c) : m(c, kSeed) {
    NoGrad no_grad;
    handed = m.model.blocks()[0]->forward_stream({.x = Variable(x.gpu)}, inputs, LayerReport());
  }
  const Block* next() const { return dynamic_cast<const Block*>(m.model.blocks()[1].get()); }
  GpuModel m;
  GpuInput x = random_input({1, 1, 384}, DType::bf16, 11);
  Tensor positions = Tensor::from_vector(std::vector<int32_t>{0}, {1}).to(kGpu);
  MixerInputs inputs{positions};
  LayerStream handed;
};

}  // namespace

// A block's last residual step handed on to the next block (FATHOM_RESIDUAL_STEP_ACROSS_LAYERS), post-norm: it changes
// no bit of a decoding step against the block's own norm launch: OLMo2 at batch 1 (the q/k/v launch's one row) and 3
// (where the next block takes it as its own launch), a dsla hybrid (whose dsla layer takes it so, and hands its own on
// to the attention after it) and MoDA with an attention-side writer (which reads the stream the launch writes;
// captured or not). And the q/k/v launch takes the step at all, the block that asks it giving its own bits.
TEST(GpuDecodeStep, TheResidualStepAcrossLayersChangesNoBitPostNorm) {
  FATHOM_REQUIRE_GPU();
  AcrossLayersChoices choices;
  for (const int64_t B : {1, 3})
    expect_fusion_changes_no_bit<ResidualStepAcrossLayersScope>(model_name(false, B), gpu_small("post", true), B, 5);
  ModelConfig hybrid = gpu_small("post", true);
  hybrid.layers = {"attention", "dsla", "attention"};
  hybrid.options.get<DslaConfig>() = {.states = 2, .gamma = DslaGamma::head};
  expect_fusion_changes_no_bit<ResidualStepAcrossLayersScope>("dsla hybrid/B1", hybrid, 1, 5);
  const MoDAConfig moda{.variant = MoDAVariant::extra_attn_kv_ffn_kv, .depth_key = DepthKey::reader};
  expect_fusion_changes_no_bit<ResidualStepAcrossLayersScope>("moda/B1", gpu_small("post", true, moda), 1, 5,
                                                              /*must_capture=*/false);
  ResidualStepAcrossLayersScope on(Fusion::fused);
  const HandedStream h(gpu_small("post", true));
  NoGrad no_grad;
  ASSERT_FALSE(h.handed.taken());
  ASSERT_NE(h.next(), nullptr);
  const auto stepped = h.next()->mixer().forward_after_residual_step(ResidualStep::post_norm, h.handed.residual,
                                                                     h.handed.out, *h.handed.norm, h.inputs,
                                                                     LayerReport());
  ASSERT_TRUE(stepped.has_value());
  EXPECT_TRUE(bitwise_equal(stepped->first.value(), h.handed.take().value()));
  EXPECT_TRUE(bitwise_equal(h.next()->forward_stream(h.handed, h.inputs, LayerReport()).take().value(),
                            h.next()->forward(h.handed.take(), h.inputs, LayerReport()).value()));
}

// The same step pre-norm: the next block takes it with its input norm in add_rms_norm's order at one row (inside the
// q/k/v launch, or in the one pass where the launch does not take it: MoDA's attention-side writer reads the
// normalised stream), where the block-by-block path's norm launch sums the squares in rms_norm's order: Llama-style
// logits at batch 1 within bf16 rounding of that path's, and bit for bit at batch 3 (the add, then the norm, either
// way). The q/k/v launch changes no bit against the one pass (FATHOM_RESIDUAL_STEP_IN_GEMM off against on, the step
// handed on), and takes the step at all, its stream the add's.
TEST(GpuDecodeStep, ThePreNormResidualStepAcrossLayersStaysWithinRounding) {
  FATHOM_REQUIRE_GPU();
  AcrossLayersChoices choices;
  const MoDAConfig moda{.variant = MoDAVariant::extra_attn_kv_ffn_kv, .depth_key = DepthKey::reader};
  expect_handed_on_pre_norm_step_close(model_name(true, 1), gpu_small("pre", false), 1, 5);
  expect_fusion_changes_no_bit<ResidualStepAcrossLayersScope>(model_name(true, 3), gpu_small("pre", false), 3, 5);
  expect_handed_on_pre_norm_step_close("pre-norm moda/B1", gpu_small("pre", false, moda), 1, 5);
  ResidualStepAcrossLayersScope across(Fusion::fused);
  expect_fusion_changes_no_bit<ResidualStepScope>("llama/B1, handed on", gpu_small("pre", false), 1, 5);
  expect_fusion_changes_no_bit<ResidualStepScope>("pre-norm moda/B1, handed on", gpu_small("pre", false, moda), 1, 5,
                                                  /*must_capture=*/false);
  const HandedStream h(gpu_small("pre", false));
  NoGrad no_grad;
  ASSERT_FALSE(h.handed.taken());
  ASSERT_NE(h.next(), nullptr);
  const RMSNorm input_norm(384, 1e-5);
  ParameterArena norm_arena(input_norm, kGpu);
  norm_arena.enable_compute_copy(DType::bf16);
  norm_arena.initialise(kSeed);
  randomise_gain(input_norm.weight(), 90);
  norm_arena.refresh_compute_copy();
  const auto stepped = h.next()->mixer().forward_after_residual_step(ResidualStep::pre_norm, h.handed.residual,
                                                                     h.handed.out, input_norm, h.inputs, LayerReport());
  ASSERT_TRUE(stepped.has_value());
  EXPECT_TRUE(bitwise_equal(stepped->first.value(), h.handed.take().value()));
}

namespace {

// A choice of where attention's splits merge changes no bit of a decoding step (expect_fusion_changes_no_bit, kOff
// against kOn), with the prologue inside the split kernel and without, OLMo2 and Llama-style, at head dims 64 and 128,
// batch 1 and 3, over 60 steps (a cache of 80 positions: two splits, the second idle until position 64).
template <typename Scope, auto kOff, auto kOn>
void expect_merge_changes_no_bit() {
  DecodePrologueScope prologue(DecodePrologue::fused);
  for (const Fusion in_attention : {Fusion::fused, Fusion::separate}) {
    PrologueInAttentionScope where(in_attention);
    for (const bool llama : {true, false})
      for (const int64_t d_model : {384, 256})
        for (const int64_t B : {1, 3}) {
          ModelConfig c = llama ? gpu_small("pre", false) : gpu_small("post", true);
          if (d_model == 256) c.d_model = 256, c.n_heads = 2, c.n_kv_heads = 1;  // head dim 128, G = 2
          expect_fusion_changes_no_bit<Scope, kOff, kOn>(
              model_name(llama, B) + "/d" + std::to_string(d_model) +
                  (in_attention == Fusion::fused ? "/prologue inside" : "/prologue apart"),
              c, B, 60);
        }
  }
}

}  // namespace

// Attention's split kernel merging its own splits by a counter (FATHOM_MERGE_IN_SPLIT=always; the cluster merge off,
// as it would take these grids) against the combine kernel.
TEST(GpuDecodeStep, TheMergeInsideAttentionChangesNoBit) {
  FATHOM_REQUIRE_GPU();
  MergeInClusterScope cluster(Toggle::off);
  expect_merge_changes_no_bit<MergeInSplitScope, Usage::never, Usage::always>();
}

// Attention's splits merged in a thread-block cluster (FATHOM_MERGE_IN_CLUSTER=on) against the combine kernel.
TEST(GpuDecodeStep, TheClusterMergeInsideAttentionChangesNoBit) {
  FATHOM_REQUIRE_GPU();
  MergeInSplitScope counter(Usage::never);
  expect_merge_changes_no_bit<MergeInClusterScope, Toggle::off, Toggle::on>();
}

TEST(GpuDecodeStep, HeadDim16FallsBackToEagerSteps) {
  FATHOM_REQUIRE_GPU();
  const ModelConfig d16{
      .d_model = 96, .n_layers = 2, .n_heads = 6, .n_kv_heads = 3, .ffn_hidden = 128, .vocab_size = 257};
  EXPECT_FALSE(replay_equals_eager("olmo2/d16", d16, 2, 9, 5, 32));
  GpuModel m(d16, kSeed);
  NoGrad no_grad;
  DecodeState state = m.model.start_decoding(1, 8, DType::bf16, kGpu);
  m.model.decode(Tensor::from_vector(std::vector<int32_t>{1, 2, 3}, {1, 3}).to(kGpu), state);
  DecodeStep step(m.model, state, true, true);
  for (int i = 0; i < 3; ++i) step.run({int32_t(10 + i)});
  EXPECT_FALSE(step.graphed());
  EXPECT_NE(step.eager_reason().find("could not be captured"), std::string::npos) << step.eager_reason();
  EXPECT_EQ(state.longest(), 6);
}

TEST(GpuGenerate, SamplingGivesTheSameTokensWithAndWithoutGraphs) {
  FATHOM_REQUIRE_GPU();
  const GraphedAndEager both;
  for (const SamplingOptions& sampling :
       {SamplingOptions{.temperature = 0},
        SamplingOptions{.temperature = 0.9, .top_k = 40, .top_p = 0.95, .seed = 11}}) {
    const auto [graphed, eager] = both({.max_new_tokens = 10, .batch = 3, .sampling = sampling, .ignore_eos = true});
    EXPECT_TRUE(graphed.cuda_graph) << graphed.eager_reason;
    EXPECT_FALSE(eager.cuda_graph);
    EXPECT_EQ(graphed.tokens, eager.tokens) << "temperature " << sampling.temperature;
    EXPECT_EQ(graphed.tokens[0].size(), 10u);
  }
}

// Greedy steps on a graph chain on the device (the next step is launched before the host reads this one's
// ids): the tokens equal the eager steps' at every length, the first and last steps included, and where a
// stop text ends the generation early (the step launched past it changes nothing returned).
TEST(GpuGenerate, ChainedGreedyStepsGiveTheEagerTokens) {
  FATHOM_REQUIRE_GPU();
  const GraphedAndEager both;
  for (const int64_t n : {1, 2, 3, 4, 9}) {
    const auto [graphed, eager] =
        both({.max_new_tokens = n, .batch = 2, .sampling = {.temperature = 0}, .ignore_eos = true});
    EXPECT_EQ(graphed.tokens, eager.tokens) << n << " tokens";
    EXPECT_EQ(graphed.tokens[0].size(), size_t(n));
    EXPECT_EQ(graphed.cuda_graph, n >= 3) << n << " tokens: " << graphed.eager_reason;
  }
  // A stop text from the middle of the eager continuation.
  const GenerationResult full = both({.max_new_tokens = 12, .sampling = {.temperature = 0}, .ignore_eos = true}).first;
  const std::string text = full.texts[0];
  ASSERT_GE(text.size(), 8u);
  // A continuation of one repeated token would hide a step taken from the wrong ids.
  ASSERT_GT(std::set<uint32_t>(full.tokens[0].begin(), full.tokens[0].end()).size(), 1u) << text;
  const auto [graphed, eager] =
      both({.max_new_tokens = 12, .sampling = {.temperature = 0}, .stop = text.substr(5, 2), .ignore_eos = true});
  EXPECT_EQ(graphed.tokens, eager.tokens);
  EXPECT_EQ(graphed.texts, eager.texts);
  EXPECT_LT(graphed.tokens[0].size(), 12u);
}

// Prompts of different lengths as one chained batch, one of them stopped by a stop text long before the
// other: every later step is still launched before the host reads the ids, and neither sequence may notice.
TEST(GpuGenerate, ChainedStepsStopOneSequenceOfABatchEarly) {
  FATHOM_REQUIRE_GPU();
  const GraphedAndEager both;
  const std::vector<std::vector<uint32_t>> prompts{both.prompt, {72, 101, 108, 108, 111, 44, 32, 119, 111, 114}};
  const GenerationOptions options{.max_new_tokens = 12, .sampling = {.temperature = 0}, .ignore_eos = true};
  const GenerationResult full = both.of_prompts(prompts, options).second;
  ASSERT_EQ(full.tokens.size(), 2u);
  ASSERT_GT(std::set<uint32_t>(full.tokens[1].begin(), full.tokens[1].end()).size(), 1u) << full.texts[1];
  // Two bytes within the second continuation's first 11 that the first one never holds: a token decodes to
  // at least one byte, so the stop ends the sequence before its 12th token.
  std::string stop;
  for (size_t at = 1; at + 2 <= std::min<size_t>(full.texts[1].size(), 11) && stop.empty(); ++at)
    if (full.texts[0].find(full.texts[1].substr(at, 2)) == std::string::npos) stop = full.texts[1].substr(at, 2);
  ASSERT_FALSE(stop.empty()) << "no stop text tells the continuations apart: '" << full.texts[0] << "', '"
                             << full.texts[1] << "'";
  GenerationOptions stopping = options;
  stopping.stop = stop;
  const auto [graphed, eager] = both.of_prompts(prompts, stopping);
  EXPECT_TRUE(graphed.cuda_graph) << graphed.eager_reason;
  EXPECT_EQ(graphed.tokens, eager.tokens);
  EXPECT_EQ(graphed.texts, eager.texts);
  EXPECT_EQ(graphed.tokens[0], full.tokens[0]);  // the other sequence runs its whole length, unchanged
  EXPECT_LT(graphed.tokens[1].size(), full.tokens[1].size());
  EXPECT_EQ(graphed.texts[1], full.texts[1].substr(0, full.texts[1].find(stop)));
}

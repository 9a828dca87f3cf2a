// bf16 mixed precision on the GPU: BF16 GEMMs writing F32 (weight gradients), RMSNorm's F32 weight
// gradient, and a tiny decoder trained with the arena's bf16 compute copy: the copy is exactly the
// rounded master after every step, activations are bf16, gradients fp32 and close to the CPU's.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rms_norm/rms_norm.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"
#include "optim/adamw.h"
#include "tests/support/gpu_test_util.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/measure/evaluator.h"
#include "train/recipe/recipe.h"
#include "train/run/stop_signal.h"
#include "train/run/trainer.h"

using namespace fathom;
using namespace fathom::test;

namespace {

ModelConfig tiny_model() {
  return {.d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_hidden = 96, .vocab_size = 97};
}

struct StepResult {
  double loss = 0;
  Tensor grads;  // F32 arena after backward, on the host
  DType logits_dtype = DType::f32;
};

// One forward + backward of a fixed batch; the arena's gradients are left in place.
StepResult forward_backward(const Decoder& model, ParameterArena& arena, Device device, uint32_t seed) {
  const ModelConfig& c = model.config();
  const int64_t B = 2, T = 48;
  arena.zero_grad();
  const Tensor ids = test::lcg_token_ids({B * T}, c.vocab_size, seed).view({B, T}).to(device);
  const Tensor targets = test::lcg_token_ids({B * T}, c.vocab_size, seed + 1000).to(device);
  const Variable logits = model.logits(ids);
  LossParts loss = cross_entropy(reshape(logits, {B * T, c.vocab_size}), targets, 1e-4);
  backward(loss.loss);
  return {loss.ce, arena.grads().to(Device::cpu()), logits.dtype()};
}

}  // namespace

TEST(GpuMixedPrecision, Bf16GemmWritesAndAccumulatesFp32) {
  FATHOM_REQUIRE_GPU();
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t m = 130, n = 72, k = 257;
      GpuInput a = random_input(ta ? Shape{k, m} : Shape{m, k}, DType::bf16, seed++);
      GpuInput b = random_input(tb ? Shape{n, k} : Shape{k, n}, DType::bf16, seed++);
      GpuInput c = random_input({m, n}, DType::f32, seed++);
      Tensor got = c.gpu.clone();
      matmul(a.gpu, ta, b.gpu, tb, got, 1.0, 1.0);  // the weight-gradient accumulation
      EXPECT_EQ(got.dtype(), DType::f32);
      Tensor want = c.cpu.clone();
      cpu::matmul(a.cpu, ta, b.cpu, tb, want, 1.0, 1.0);
      // Exact bf16 products summed in fp32: f32 accuracy, not bf16's.
      EXPECT_LE(relative_l2(got, want), 1e-5) << (ta ? "aT " : "") << (tb ? "bT" : "");
      Tensor fresh = Tensor::empty({m, n}, DType::f32, kGpu);
      matmul(a.gpu, ta, b.gpu, tb, fresh, 1.0, 0.0);
      EXPECT_LE(relative_l2(fresh, matmul(a.cpu, ta, b.cpu, tb)), 1e-5);
    }
  // The combination is CUDA-only, and only BF16 -> F32.
  Tensor a = random_tensor({4, 4}, DType::f32, 1).to(DType::bf16), c = Tensor::empty({4, 4}, DType::f32);
  fathom::testing::expect_error([&] { matmul(a, false, a, false, c); }, {"CUDA-only"});
  Tensor f16 = random_tensor({4, 4}, DType::f32, 2).to(DType::f16).to(kGpu),
         c_gpu = Tensor::empty({4, 4}, DType::f32, kGpu);
  fathom::testing::expect_error([&] { matmul(f16, false, f16, false, c_gpu); }, {"dtypes differ"});
}

TEST(GpuMixedPrecision, RmsNormWeightGradientInFp32) {
  FATHOM_REQUIRE_GPU();
  const int64_t n = 768;
  GpuInput x = random_input({300, n}, DType::bf16, 1), w = random_input({n}, DType::bf16, 2);
  GpuInput g = random_input({300, n}, DType::bf16, 3);
  const RmsNormOutput out = rms_norm_forward(x.gpu, w.gpu, 1e-6);
  const RmsNormGrads as_weight = rms_norm_backward(g.gpu, x.gpu, w.gpu, out.rstd);
  const RmsNormGrads fp32 = rms_norm_backward(g.gpu, x.gpu, w.gpu, out.rstd, DType::f32);
  EXPECT_EQ(as_weight.dweight.dtype(), DType::bf16);
  ASSERT_EQ(fp32.dweight.dtype(), DType::f32);
  EXPECT_TRUE(bitwise_equal(fp32.dx, as_weight.dx));
  EXPECT_TRUE(bitwise_equal(fp32.dweight.to(DType::bf16), as_weight.dweight)) << "the same f32 sum, unrounded";
  const RmsNormOutput ref = rms_norm_forward(x.cpu, w.cpu, 1e-6);
  const RmsNormGrads want = rms_norm_backward(g.cpu, x.cpu, w.cpu, ref.rstd);
  EXPECT_LE(relative_l2(fp32.dweight, want.dweight), 1e-4);
  fathom::testing::expect_error([&] { rms_norm_backward(g.gpu, x.gpu, w.gpu, out.rstd, DType::f16); },
                                {"weight gradient can be BF16", "F16"});
}

TEST(GpuMixedPrecision, Bf16CopyIsTheRoundedMasterAfterEveryStep) {
  FATHOM_REQUIRE_GPU();
  const ModelConfig c = tiny_model();
  Decoder model(c);
  ParameterArena arena(model, kGpu);
  arena.enable_compute_copy(DType::bf16);
  arena.initialise(11);
  EXPECT_TRUE(bitwise_equal(arena.compute_values(), arena.values().to(DType::bf16))) << "after initialise";
  AdamW optimizer(arena, AdamWConfig{0.9, 0.95, 1e-8, 0.1});
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    const StepResult r = forward_backward(model, arena, kGpu, 7);  // one batch, memorised
    EXPECT_EQ(r.logits_dtype, DType::bf16) << "activations are bf16";
    EXPECT_EQ(arena.grads().dtype(), DType::f32);
    EXPECT_TRUE(std::isfinite(r.loss));
    if (step == 0) first = r.loss;
    last = r.loss;
    const Tensor before = arena.compute_values().to(Device::cpu());
    optimizer.step(1e-2);
    EXPECT_TRUE(bitwise_equal(arena.compute_values(), arena.values().to(DType::bf16))) << "step " << step + 1;
    EXPECT_FALSE(bitwise_equal(arena.compute_values(), before)) << "step " << step + 1 << " changed nothing";
  }
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last;
}

TEST(GpuMixedPrecision, LossAndFp32GradientsMatchTheCpuReference) {
  FATHOM_REQUIRE_GPU();
  const ModelConfig c = tiny_model();
  Decoder cpu_model(c), gpu_model(c);
  ParameterArena cpu_arena(cpu_model, Device::cpu()), gpu_arena(gpu_model, kGpu);
  cpu_arena.initialise(3);
  gpu_arena.enable_compute_copy(DType::bf16);
  gpu_arena.load(cpu_arena.named_values(), "cpu arena");
  const StepResult want = forward_backward(cpu_model, cpu_arena, Device::cpu(), 21);
  const StepResult got = forward_backward(gpu_model, gpu_arena, kGpu, 21);
  EXPECT_NEAR(got.loss, want.loss, 1e-2 * want.loss);
  EXPECT_LE(relative_l2(got.grads, want.grads), 3e-2) << "bf16 activations, fp32 gradient accumulation";
  // Per parameter too, so no small tensor hides behind the large ones.
  double worst = 0;
  for (const ArenaEntry& e : gpu_arena.entries()) {
    const double err = relative_l2(got.grads.narrow(e.offset, e.numel()), want.grads.narrow(e.offset, e.numel()));
    EXPECT_LE(err, 1e-1) << e.name;
    worst = std::max(worst, err);
  }
  std::printf("loss %.6f vs %.6f on the CPU; gradient relative L2 %.2e overall, %.2e worst parameter\n", got.loss,
              want.loss, relative_l2(got.grads, want.grads), worst);
}

// OLMo2, and MoDA (whose re-run blocks rewind the depth stream and rewrite their slots); block and
// selective recompute.
TEST(GpuMixedPrecision, RecomputeGivesTheSameGradients) {
  FATHOM_REQUIRE_GPU();
  for (const Recompute recompute : {Recompute::block, Recompute::selective}) {
    for (const std::string variant : {"none", "attn_kv+ffn_kv"}) {
      ModelConfig c = tiny_model();
      c.n_layers = 3;
      c.options.get<MoDAConfig>().variant = parse_moda_variant(variant);
      if (variant != "none") {  // the MoDA kernels take head dims 64 and 128
        c.d_model = 128;
        c.n_heads = 2;
        c.n_kv_heads = 1;
      }
      const std::string what = std::string(recompute_name(recompute)) + " " + variant;
      Decoder plain(c), recomputed(c);
      recomputed.set_recompute(recompute);
      ParameterArena a(plain, kGpu), b(recomputed, kGpu);
      a.enable_compute_copy(DType::bf16);
      b.enable_compute_copy(DType::bf16);
      a.initialise(5);
      b.initialise(5);
      const StepResult x = forward_backward(plain, a, kGpu, 31), y = forward_backward(recomputed, b, kGpu, 31);
      EXPECT_EQ(x.loss, y.loss) << what;
      EXPECT_LE(relative_l2(y.grads, x.grads), 1e-6) << what;
      std::printf("%s: recompute gradients bit-identical: %s\n", what.c_str(),
                  bitwise_equal(x.grads, y.grads) ? "yes" : "no");
    }
  }
}

TEST(GpuMixedPrecision, TrainerRefusesARunThatCannotFitBeforeAllocating) {
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const Recipe recipe = parse_recipe(
      "name: too-big\n"
      "model: {size: olmo2_1B}\n"
      "data: {tokenizer: bytes, train: [" +
          (dir / "absent.txt").string() +
          "]}\n"
          "train: {device: cuda, batch_size: 256, seq_len: 4096, steps: 1, optimizer: {lr: 1.0e-3}}\n"
          "log: {dir: " +
          (dir / "run").string() + "}\n",
      "too-big.yaml");
  RunOptions options;
  options.quiet = true;
  // The data file does not exist: the memory check comes first, before the run folder and the data.
  fathom::testing::expect_error([&] { run_training(recipe, options); },
                                {"training needs about", "on cuda:0 but only", "lower train.batch_size (now 256",
                                 "set train.recompute: selective or block"});
  EXPECT_FALSE(std::filesystem::exists(dir / "run"));
}

TEST(GpuMixedPrecision, ResumeAndEvalRebuildTheBf16CopyFromTheSavedMasters) {
  // Checkpoints hold the fp32 masters only: a resumed run and `fathom eval` rebuild the bf16 copy
  // from them and must get exactly what the uninterrupted run had.
  FATHOM_REQUIRE_GPU();
  fathom::testing::ScratchFolder dir;
  const std::string corpus = std::string(FATHOM_SOURCE_DIR) + "/data/corpus/quickstart";
  auto recipe = [&](const std::string& run) {
    return parse_recipe(
        "name: resume\n"
        "model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 96, vocab_size: 264}\n"
        "data: {tokenizer: bytes, train: [" +
            corpus + "/train/sotu_2009-2019.txt], validation: {moby: [" + corpus +
            "/validation/moby_dick.txt]}}\n"
            "train: {device: cuda, batch_size: 4, seq_len: 64, steps: 6, optimizer: {lr: 3.0e-3}}\n"
            "eval: {every: 0, batches: 2}\n"
            "log: {every: 1, dir: " +
            (dir / run).string() + "}\n",
        "resume.yaml");
  };
  RunOptions options;
  options.quiet = true;
  const TrainResult straight = run_training(recipe("straight"), options);
  request_stop();  // as SIGINT would: step 1, a checkpoint, return
  const TrainResult stopped = run_training(recipe("resumed"), options);
  clear_stop_request();
  ASSERT_EQ(stopped.steps_done, 1);
  options.resume = true;
  const TrainResult resumed = run_training(recipe("resumed"), options);
  EXPECT_EQ(resumed.last_loss, straight.last_loss);
  const TensorMap a = load_checkpoint(*latest_checkpoint(dir / "straight")).model;
  const TensorMap b = load_checkpoint(*latest_checkpoint(dir / "resumed")).model;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i].second, b[i].second)) << a[i].first;

  std::ostringstream out;
  run_evaluation(recipe("straight"), (dir / "straight").string(), out);
  char want[64];
  std::snprintf(want, sizeof want, "loss %.4f", straight.validation_loss.at("moby"));
  EXPECT_NE(out.str().find(want), std::string::npos) << out.str() << " vs the trainer's " << want;
}

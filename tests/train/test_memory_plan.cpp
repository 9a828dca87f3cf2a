// The training memory estimate (train/measure/memory_plan.h): its arithmetic for a named size, and the
// start-up check that refuses a run which cannot fit.
#include <gtest/gtest.h>

#include <algorithm>

#include "layers/decoder.h"
#include "tests/support/test_support.h"
#include "train/measure/memory_plan.h"

using namespace fathom;

namespace {
MemoryPlanInput olmo2_190m(bool bf16, Recompute recompute = Recompute::none) {
  return MemoryPlanInput{named_model_size("olmo2_190M"), 16, 2048, bf16, recompute};
}
}  // namespace

TEST(MemoryPlan, Olmo2_190MInBf16) {
  // d 768, 12 layers, 12 heads (= KV heads), FFN 3072, vocab 100352, QK-norm; 16 x 2048 tokens.
  const MemoryPlan p = plan_training_memory(olmo2_190m(true));
  const size_t n = size_t(parameter_count(named_model_size("olmo2_190M")));
  EXPECT_EQ(p.parameters, int64_t(n));
  EXPECT_EQ(p.master_weights, 4 * n);
  EXPECT_EQ(p.compute_weights, 2 * n);
  EXPECT_EQ(p.gradients, 4 * n);
  EXPECT_EQ(p.optimizer_state, 8 * n);
  const size_t tokens = 16 * 2048;
  // Per token and block: 4 residual-width tensors (4 * 768), q and k before and after RoPE and v, o
  // (6 * 768), SwiGLU gate, up and output (3 * 3072): 16896 bf16 values; 4 norm rstd + 12 lse in fp32.
  const size_t block = tokens * (16896 * 2 + 16 * 4);
  const size_t head = tokens * (768 * 2 + 4);  // final norm input and rstd
  EXPECT_EQ(p.activations, 12 * block + block + head);
  EXPECT_EQ(p.activations, size_t(14472577024));
  // The head and loss: a chunk of 5312 rows of logits (1 GiB / 200704 bytes a row, a multiple of 64)
  // with their fp32 lse, dh (bf16) and the head's dW (fp32).
  EXPECT_EQ(loss_chunk_rows(100352, 2), 5312);
  EXPECT_EQ(p.logits, 5312 * (100352 * 2 + 4) + tokens * 768 * 2 + size_t(4) * 100352 * 768);
  EXPECT_EQ(p.workspace, size_t(32) << 20);
  EXPECT_EQ(p.total(), 18 * n + p.activations + p.logits + p.workspace);
  EXPECT_NE(p.describe().find("activations"), std::string::npos);
  EXPECT_NE(p.describe().find("13.48 GiB"), std::string::npos) << p.describe();  // 14472577024 bytes
}

TEST(MemoryPlan, RecomputeAndPrecisionChangeWhatTheyShould) {
  const MemoryPlan bf16 = plan_training_memory(olmo2_190m(true));
  const MemoryPlan recompute = plan_training_memory(olmo2_190m(true, Recompute::block));
  const MemoryPlan fp32 = plan_training_memory(olmo2_190m(false));
  const size_t tokens = 16 * 2048, block = tokens * (16896 * 2 + 16 * 4), head = tokens * (768 * 2 + 4);
  // Recompute: each block keeps its [B, T, d] input; the block being backpropagated is re-run.
  EXPECT_EQ(recompute.activations, 12 * tokens * 768 * 2 + 2 * block + head);
  EXPECT_EQ(recompute.logits, bf16.logits);
  EXPECT_EQ(recompute.master_weights, bf16.master_weights);
  // Selective: per block SwiGLU's output (3072), RoPE's q and k (2 * 768) and the stream after
  // attention (768, post-norm) are rebuilt, not kept.
  const MemoryPlan selective = plan_training_memory(olmo2_190m(true, Recompute::selective));
  const size_t selective_block = tokens * ((16896 - 3072 - 3 * 768) * 2 + 16 * 4);
  EXPECT_EQ(selective.activations, 12 * selective_block + block + head);
  EXPECT_EQ(selective.logits, bf16.logits);
  // fp32: no bf16 copy, 4-byte activations and logits, the head's weight gradient as a temporary.
  EXPECT_EQ(fp32.compute_weights, 0u);
  EXPECT_EQ(fp32.activations, 13 * tokens * (16896 * 4 + 16 * 4) + tokens * (768 * 4 + 4));
  EXPECT_EQ(fp32.logits, 2624 * (100352 * 4 + 4) + tokens * 768 * 4 + size_t(4) * 100352 * 768);
  EXPECT_EQ(fp32.workspace, (size_t(32) << 20) + 4 * size_t(100352) * 768);
}

TEST(MemoryPlan, MoDAAddsTheDepthCacheAndWhatItsReadersKeep) {
  MemoryPlanInput in = olmo2_190m(true);
  const MemoryPlan plain = plan_training_memory(in);
  in.model.options.get<MoDAConfig>().variant = MoDAVariant::attn_kv_ffn_kv;  // 2 slots per block, 11 writing blocks
  const size_t tokens = size_t(16 * 2048);
  // G = 1: readers leave weights; each of layers 1..11 keeps q and dO (bf16) and two fp32 weights
  // per query head and slot it read (2 per earlier layer).
  const MemoryPlan moda = plan_training_memory(in);
  EXPECT_EQ(moda.activations - plain.activations,
            2 * tokens * (22 * 12 * 64) * 2 + tokens * 12 * (11 * 2 * 64 * 2 + 2 * 4 * 2 * 66));
  // G = 6: vector gradients in fp32 buffers of the cache's shape.
  in.model.n_kv_heads = 2;
  MemoryPlanInput plain_gqa = in;
  plain_gqa.model.options.get<MoDAConfig>().variant = MoDAVariant::none;
  EXPECT_EQ(plan_training_memory(in).activations - plan_training_memory(plain_gqa).activations,
            2 * tokens * (22 * 2 * 64) * 2 + 2 * tokens * (22 * 2 * 64) * 4);
}

TEST(MemoryPlan, ARunThatCannotFitFailsWithTheNumbersAndTheKnobs) {
  const MemoryPlanInput in = olmo2_190m(true);
  const MemoryPlan p = plan_training_memory(in);
  check_memory_plan_fits(p, p.total(), in, "cuda:0");  // exactly enough
  fathom::testing::expect_error(
      [&] { check_memory_plan_fits(p, size_t(16) << 30, in, "cuda:0"); },
      {"training needs about 19.32 GiB", "on cuda:0 but only 16.00 GiB are free", "lower train.batch_size (now 16",
       "set train.recompute: selective or block", "activations"});
  const MemoryPlanInput fp32 = olmo2_190m(false, Recompute::block);
  const std::string message =
      fathom::testing::error_of([&] { check_memory_plan_fits(plan_training_memory(fp32), 1 << 30, fp32, "cuda:0"); });
  EXPECT_EQ(message.find("set train.recompute"), std::string::npos) << "recompute is already on: " << message;
  EXPECT_NE(message.find("train.precision: bf16"), std::string::npos) << message;
}

TEST(MemoryPlan, ADistillationCountsItsTeacher) {
  // A 190M teacher (bf16) beside its student at 16 x 2048 tokens, with logit_kl and layer_align.
  MemoryPlanInput in = olmo2_190m(true);
  const MemoryPlan student = plan_training_memory(in);
  in.teacher = TeacherMemoryInput{named_model_size("olmo2_190M"), true, true, true, false};
  const MemoryPlan p = plan_training_memory(in);
  const size_t n = size_t(parameter_count(named_model_size("olmo2_190M")));
  EXPECT_EQ(p.teacher_weights, 6 * n);  // fp32 weights and their bf16 copy
  const size_t tokens = 16 * 2048, hidden = tokens * 768 * 2, vocab_rows = tokens * size_t(100352);
  const size_t block = tokens * (16896 * 2 + 16 * 4);  // a block's working set under NoGrad (as saved for backward)
  // The residual stream twice, one block's working set, every layer's output (layer_align), the
  // teacher's logits, the student's whole logits and their gradient, two fp32 lse per row.
  EXPECT_EQ(p.teacher_forward, 2 * hidden + block + 12 * hidden + 3 * vocab_rows * 2 + tokens * 8);
  EXPECT_EQ(p.total(), student.total() + p.teacher_weights + p.teacher_forward);
  EXPECT_NE(p.describe().find("teacher weights"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("teacher forward"), std::string::npos) << p.describe();
  // Room for the student alone is not enough; the message names the teacher's part.
  const std::string message =
      fathom::testing::error_of([&] { check_memory_plan_fits(p, student.total(), in, "cuda:0"); });
  EXPECT_NE(message.find("teacher forward"), std::string::npos) << message;
  EXPECT_NE(message.find("the teacher's logits and the student's"), std::string::npos) << message;
  check_memory_plan_fits(p, p.total(), in, "cuda:0");
}

TEST(MemoryPlan, ALoadedTeacherIsGivenBackToTheFreeMemory) {
  ModelConfig small = named_model_size("olmo2_190M");
  small.d_model = 128, small.n_layers = 2, small.n_heads = small.n_kv_heads = 2, small.ffn_hidden = 256;
  small.vocab_size = 1000;
  MemoryPlanInput in{small, 4, 64, true, Recompute::none};
  in.teacher = TeacherMemoryInput{small, true, false, false, false};
  const MemoryPlan plan = plan_training_memory(in);
  // Without logit_kl nor layer_align only the forward's working set remains: the residual stream
  // twice and one block's tensors.
  const size_t tokens = 4 * 64;
  size_t block = 0;
  for (const LayerCost& cost : Decoder(small).layer_costs(64))
    block = std::max(block, tokens * (size_t(cost.saved_elements) * 2 + size_t(cost.saved_stats) * 4));
  EXPECT_EQ(plan.teacher_forward, 2 * tokens * 128 * 2 + block);
  EXPECT_FALSE(plan.teacher_resident);
  // A teacher loaded before the check is no longer in the free memory: its weights are given back.
  in.teacher->resident = true;
  const MemoryPlan loaded = plan_training_memory(in);
  EXPECT_TRUE(loaded.teacher_resident);
  EXPECT_EQ(loaded.total(), plan.total());
  check_memory_plan_fits(loaded, plan.total() - plan.teacher_weights, in, "cuda:0");
  fathom::testing::expect_error(
      [&] { check_memory_plan_fits(loaded, plan.total() - plan.teacher_weights - 1, in, "cuda:0"); },
      {"with the loaded teacher's weights", "teacher (loaded)"});
  fathom::testing::expect_error([&] { check_memory_plan_fits(plan, plan.total() - 1, in, "cuda:0"); },
                                {"teacher weights"});
}

TEST(MemoryPlan, BadInputsAreErrors) {
  MemoryPlanInput in = olmo2_190m(true);
  in.batch_size = 0;
  fathom::testing::expect_error([&] { plan_training_memory(in); }, {"batch size", "must be >= 1"});
}

// A data-parallel run plans one rank: ZeRO-1 keeps a quarter of the moments on each of 4 ranks plus
// the fp32 staging of the padded arena and its shard (with bf16 on the wire, bf16 copies of both and
// the shard's fp32 conversion); overlapped bf16 buckets keep a bf16 copy of
// every gradient until they are waited for; fp32 buckets reduce in place.
TEST(MemoryPlan, DataParallelPlansOneRank) {
  const MemoryPlan alone = plan_training_memory(olmo2_190m(true));
  const size_t n = size_t(alone.parameters), chunk = (n + 3) / 4;
  MemoryPlanInput in = olmo2_190m(true);
  in.world = 4;
  const MemoryPlan plain = plan_training_memory(in);
  EXPECT_EQ(plain.optimizer_state, 8 * n);
  EXPECT_EQ(plain.reduction, 0u);
  EXPECT_EQ(plain.total(), alone.total());
  in.bf16_wire = true;
  EXPECT_EQ(plan_training_memory(in).reduction, 2 * n);
  in.bf16_wire = false;
  in.zero = 1;
  const MemoryPlan zero = plan_training_memory(in);
  EXPECT_EQ(zero.optimizer_state, 8 * chunk);
  EXPECT_EQ(zero.reduction, 4 * (4 * chunk + chunk));
  in.bf16_wire = true;  // the bf16 wire copies of the staging and the shard, and the shard back in fp32
  EXPECT_EQ(plan_training_memory(in).reduction, 4 * (4 * chunk + chunk) + 2 * (4 * chunk + chunk) + 4 * chunk);
  in.bf16_wire = false;
  EXPECT_NE(zero.describe().find("reduction"), std::string::npos) << zero.describe();
  EXPECT_EQ(alone.describe().find("reduction"), std::string::npos) << alone.describe();
  in.world = 0;
  fathom::testing::expect_error([&] { plan_training_memory(in); }, {"world must be >= 1"});
  in.world = 2;
  in.zero = 2;
  fathom::testing::expect_error([&] { plan_training_memory(in); }, {"zero 0 or 1"});
}

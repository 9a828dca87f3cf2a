#include <gtest/gtest.h>

#include "layers/decoder.h"
#include "layers/model_config.h"
#include "train/measure/metrics_log.h"
#include "train/measure/throughput.h"

using namespace fathom;

TEST(Throughput, FlopsPerTokenCountsWeightsAndAttention) {
  ModelConfig c = named_model_size("olmo2_190M");
  const double weights = double(parameter_count(c) - c.vocab_size * c.d_model);
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 2048), 6 * weights + 6.0 * 12 * 768 * 2048);
  // The embedding lookup adds no FLOPs, the untied head does.
  ModelConfig tied = c;
  tied.tie_embeddings = true;
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 2048) - training_flops_per_token(tied, 2048),
                   6.0 * double(c.vocab_size * c.d_model));
}

TEST(Throughput, PeakTableKnowsTheH200) {
  EXPECT_DOUBLE_EQ(dense_bf16_peak_flops("NVIDIA H200"), 989e12);
  EXPECT_EQ(dense_bf16_peak_flops("cpu"), 0.0);
}

TEST(Throughput, ProgressLineShowsMfuAndMemoryOnlyWhenKnown) {
  Progress p;
  p.step = 20;
  p.total_steps = 400;
  p.loss = 3.25;
  p.lr = 1e-3;
  p.grad_norm = 0.5;
  p.tokens_per_second = 123456.4;
  p.eta_seconds = 75;
  EXPECT_EQ(format_progress(p), "step 20/400 | loss 3.2500 | lr 1.00e-03 | gnorm 0.500 | 123,456 tok/s | ETA 1m15s");
  p.mfu = 0.4567;
  p.memory_gib = 12.25;
  p.peak_memory_gib = 20.5;
  EXPECT_EQ(format_progress(p),
            "step 20/400 | loss 3.2500 | lr 1.00e-03 | gnorm 0.500 | 123,456 tok/s | MFU 45.7% | "
            "mem 12.2/20.5 GiB | ETA 1m15s");
}
